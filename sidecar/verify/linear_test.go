package verify_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Linear publishes no example signature: the vectors are computed here from
// the documented construction (hex HMAC-SHA256 of the raw body,
// https://linear.app/developers/webhooks#securing-webhooks).

func linearHeaders(sig string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("Linear-Signature", sig)
	}
	h.Set("Linear-Delivery", "del-1")
	return h
}

func TestLinear(t *testing.T) {
	v := pvBuild(t, verify.TypeLinear, verify.Core{Secrets: []string{"old", "new"}}, nil)
	ms := pvNow.UnixMilli()
	body := verifytest.LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "Done", ms)

	ev := oneEvent(t, v, verify.Request{Header: linearHeaders(hmacHex("new", body)), Body: body})
	require.Equal(t, verify.JoinKey("org-1", "Issue", "update", "9f6c2b1e-0000-4000-8000-00000000a001", "2026-12-05T04:00:05.000Z"), ev.ID)
	require.Equal(t, "Issue.update", ev.Type)
	require.Equal(t, "org-1", ev.Scope)
	require.Equal(t, pvNow, ev.Timestamp)
	oneEvent(t, v, verify.Request{Header: linearHeaders(strings.ToUpper(hmacHex("old", body))), Body: body})

	_, err := v.Verify(verify.Request{Header: linearHeaders(""), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "Linear-Signature")
	_, err = v.Verify(verify.Request{Header: linearHeaders("sha256=" + hmacHex("new", body)), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "Linear-Signature")
	_, err = v.Verify(verify.Request{Header: linearHeaders(hmacHex("wrong", body)), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "Linear-Signature")

	// Linear's documented 60 s window, both ways.
	win := pvBuild(t, verify.TypeLinear, verify.Core{Secrets: []string{"new"}, Tolerance: verify.LinearTolerance}, nil)
	for _, off := range []time.Duration{61 * time.Second, -61 * time.Second} {
		b := verifytest.LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "Done", pvNow.Add(off).UnixMilli())
		_, err = win.Verify(verify.Request{Header: linearHeaders(hmacHex("new", b)), Body: b})
		requireCode(t, err, verify.CodeTimestampOutsideTolerance, "/webhookTimestamp")
	}
	b := verifytest.LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "Done", pvNow.Add(59*time.Second).UnixMilli())
	oneEvent(t, win, verify.Request{Header: linearHeaders(hmacHex("new", b)), Body: b})
	// A source that sets no tolerance gets Linear's 60 s default
	// (Provider.DefaultTolerance, applied by verify.New).
	direct := pvBuild(t, verify.TypeLinear, verify.Core{Secrets: []string{"new"}}, nil)
	b = verifytest.LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "Done", pvNow.Add(-61*time.Second).UnixMilli())
	_, err = direct.Verify(verify.Request{Header: linearHeaders(hmacHex("new", b)), Body: b})
	requireCode(t, err, verify.CodeTimestampOutsideTolerance, "/webhookTimestamp")
	// A source's tolerance replaces it.
	wide := pvBuild(t, verify.TypeLinear, verify.Core{Secrets: []string{"new"}, Tolerance: 5 * time.Minute}, nil)
	b = verifytest.LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "Done", pvNow.Add(-4*time.Minute).UnixMilli())
	oneEvent(t, wide, verify.Request{Header: linearHeaders(hmacHex("new", b)), Body: b})

	noTS := []byte(`{"action":"create","type":"Issue","data":{"id":"x"},"createdAt":"t"}`)
	_, err = v.Verify(verify.Request{Header: linearHeaders(hmacHex("new", noTS)), Body: noTS})
	requireCode(t, err, verify.CodeMissingField, "/webhookTimestamp")

	// Payloads without data.id are keyed by Linear-Delivery.
	agent := []byte(`{"type":"AgentSessionEvent","action":"created","createdAt":"2026-12-05T04:00:00.000Z","agentSession":{"id":"s-1"},"webhookTimestamp":` + itoa(ms) + `}`)
	ev = oneEvent(t, v, verify.Request{Header: linearHeaders(hmacHex("new", agent)), Body: agent})
	require.Equal(t, "del-1", ev.ID)
	_, err = v.Verify(verify.Request{Header: withHeaders(linearHeaders(hmacHex("new", agent)), "Linear-Delivery", ""), Body: agent})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "Linear-Delivery").Authenticated)

	only := pvBuild(t, verify.TypeLinear, verify.Core{Secrets: []string{"new"}, AllowedEventTypes: []string{"Comment.*"}}, nil)
	_, err = only.Verify(verify.Request{Header: linearHeaders(hmacHex("new", body)), Body: body})
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/type")

	p, _ := verify.Lookup(verify.TypeLinear)
	require.Equal(t, []string{"/webhookTimestamp"}, p.VolatileFields)
	require.True(t, p.SignsTimestamp)
}

func TestLinearFixture(t *testing.T) { replayFixture(t, "linear") }
