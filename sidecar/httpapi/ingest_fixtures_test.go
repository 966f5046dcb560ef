package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestIngestFixtures replays every registered verifytest.Fixture through
// POST /ingest/{source} (GET or HEAD for a handshake that uses them) on a
// real PostgreSQL, one source per fixture configured from its secrets and
// options as the sources file writes them:
//   - its distinct deliveries are as many new records as events they
//     carry (EventsPerDelivery each), all with different claim ids;
//   - its redeliveries are duplicates of the first one's records (same
//     claim ids), nothing new stored;
//   - where the provider answers taken deliveries itself (Cases.Reply:
//     Discord's deferred interaction response), every distinct delivery
//     and redelivery is answered with that body instead of receipts (the
//     counts tell what was stored);
//   - its tampered delivery is refused with the source's unauthenticated
//     status, nothing stored;
//   - each handshake is answered with its status and body, nothing stored.
//
// One subtest per provider type: go test -run 'TestIngestFixtures/<type>$'.
// The Verify-level twin is sidecar/verify's TestFixtures.
func TestIngestFixtures(t *testing.T) {
	t.Parallel()
	fixtures := verifytest.Fixtures()
	sources := map[string]any{}
	for _, f := range fixtures {
		opts := f.Options
		if f.Setup != nil {
			opts = f.Setup(t)
		}
		src := map[string]any{"tenant": ingestTenant, "provider": f.Type, "secrets": f.Secrets,
			"forward": map[string]any{"url": "http://127.0.0.1:9/never"}}
		if len(opts) > 0 {
			src["options"] = opts
		}
		sources[fixtureSource(f.Type)] = src
	}
	file, err := json.Marshal(map[string]any{"sources": sources}) // YAML reads JSON
	require.NoError(t, err)
	e := setupIngest(t, string(file), ingestOptions{maxConns: 12})

	for _, f := range fixtures {
		t.Run(f.Type, func(t *testing.T) {
			t.Parallel()
			p, ok := verify.Lookup(verify.Type(f.Type))
			require.True(t, ok)
			accepted := http.StatusOK
			if p.AcceptedStatus != 0 {
				accepted = p.AcceptedStatus
			}
			source := fixtureSource(f.Type)
			c := f.Cases(time.Now())
			per := max(c.EventsPerDelivery, 1)

			// Distinct deliveries: one new record per event. The
			// receipts are read where the accepted status has a body (a
			// 204 has none: the counts tell).
			ids := map[string]bool{}
			for i, d := range c.Distinct {
				before := e.counts(t, source)
				a := e.sendFixture(t, source, d)
				require.Equal(t, accepted, a.status, "distinct %d: %s", i, a.body)
				require.Equal(t, ingestCounts{before.claims + per, before.inbox + per, before.jobs + per, before.conflicts}, e.counts(t, source),
					"distinct %d: one new record per event", i)
				if c.Reply != nil {
					require.Equal(t, string(c.Reply), string(a.body), "distinct %d: the provider's own reply", i)
					continue
				}
				if accepted == http.StatusNoContent {
					continue
				}
				rs, rejected := a.receipts(t)
				require.Zero(t, rejected, "distinct %d: %s", i, a.body)
				require.Len(t, rs, per, "distinct %d: events per delivery", i)
				for _, r := range rs {
					require.Equal(t, "accepted", r.Status, "distinct %d is new: %s", i, a.body)
					require.False(t, ids[r.ClaimID], "distinct %d: a record of its own", i)
					ids[r.ClaimID] = true
				}
			}

			after := e.counts(t, source)
			if !c.Nudges {
				// Redeliveries: duplicates of the first one's records (which
				// may repeat a distinct delivery's event).
				a := e.sendFixture(t, source, c.Redelivery[0])
				require.Equal(t, accepted, a.status, "redelivery 0: %s", a.body)
				var first []ingestReceipt
				switch {
				case c.Reply != nil:
					require.Equal(t, string(c.Reply), string(a.body), "redelivery 0: the provider's own reply")
				case accepted != http.StatusNoContent:
					first, _ = a.receipts(t)
					require.NotEmpty(t, first)
				}
				after = e.counts(t, source)
				for i, d := range c.Redelivery[1:] {
					a := e.sendFixture(t, source, d)
					require.Equal(t, accepted, a.status, "redelivery %d: %s", i+1, a.body)
					require.Equal(t, after, e.counts(t, source), "redelivery %d stores nothing new", i+1)
					if c.Reply != nil {
						require.Equal(t, string(c.Reply), string(a.body), "redelivery %d: the provider's own reply", i+1)
						continue
					}
					if accepted == http.StatusNoContent {
						continue
					}
					rs, _ := a.receipts(t)
					require.Len(t, rs, len(first), "redelivery %d", i+1)
					for j, r := range rs {
						require.Equal(t, ingestReceipt{EventID: first[j].EventID, ClaimID: first[j].ClaimID, Status: "duplicate"}, r,
							"redelivery %d is the first event again", i+1)
					}
				}
			}

			// A tampered delivery: the source's unauthenticated answer.
			a := e.sendFixture(t, source, c.Tampered)
			require.Equal(t, http.StatusUnauthorized, a.status, "tampered: %s", a.body)
			require.Equal(t, after, e.counts(t, source), "a tampered delivery stores nothing")

			// Handshakes: answered as the provider expects, nothing stored.
			for i, h := range c.Handshakes {
				a := e.sendFixture(t, source, h.Delivery)
				require.Equal(t, h.Status, a.status, "handshake %d: %s", i, a.body)
				if h.Body != nil && h.Delivery.Method != http.MethodHead {
					require.Equal(t, string(h.Body), string(a.body), "handshake %d", i)
				}
			}
			require.Equal(t, after, e.counts(t, source), "a handshake stores nothing")
		})
	}
}

// fixtureSource is the source name of the fixture of provider type typ.
func fixtureSource(typ string) string { return "fx-" + typ }

// sendFixture sends d (POST unless it names another method) to source.
func (e *ingestEnv) sendFixture(t *testing.T, source string, d verifytest.Delivery) ingestAnswer {
	t.Helper()
	method := d.Method
	if method == "" {
		method = http.MethodPost
	}
	u := e.base + "/ingest/" + source
	if d.RawQuery != "" {
		u += "?" + d.RawQuery
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(d.Body))
	require.NoError(t, err)
	for k, vs := range d.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if len(d.Body) == 0 && method != http.MethodPost {
		req.Body, req.ContentLength = nil, 0
	}
	return e.do(t, req)
}
