package ingest

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

func TestDispatchBackoffIsFullJitterUnderTheCap(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, 10*time.Second
	for attempt, ceiling := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: limit, 80: limit, 5000: limit} {
		require.Equal(t, ceiling, backoff(base, limit, attempt, 1), "attempt %d", attempt)
		require.Equal(t, ceiling/2, backoff(base, limit, attempt, 0.5), "attempt %d", attempt)
		require.Zero(t, backoff(base, limit, attempt, 0), "attempt %d", attempt)
	}
}

func TestDispatchRetryAfterParsing(t *testing.T) {
	t.Parallel()
	require.Equal(t, 3*time.Second, retryAfter("3"))
	require.Equal(t, 3*time.Second, retryAfter(" 3 "))
	require.Zero(t, retryAfter(""))
	require.Zero(t, retryAfter("-1"))
	require.Zero(t, retryAfter("soon"))
	require.Equal(t, time.Hour, retryAfter("999999"), "capped at an hour")
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	d := retryAfter(future)
	require.Positive(t, d)
	require.LessOrEqual(t, d, 90*time.Second)
	require.Zero(t, retryAfter(time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)), "a past date means now")
}

func TestDispatchQueueNamesAreValidRiverQueues(t *testing.T) {
	t.Parallel()
	require.Equal(t, "dispatch_stripe", queueName("stripe"))
	require.Equal(t, "dispatch_github_orders", queueName("github.orders"), "readable names are kept")
	seen := map[string]string{}
	for _, n := range []string{"a--b", "a-", "a.", "a._b", "a..b", strings.Repeat("x", 55), strings.Repeat("x", 56), strings.Repeat("y", 100), "0", "a-b-c"} {
		q := queueName(n)
		require.LessOrEqual(t, len(q), 64, n)
		require.Regexp(t, riverQueueName, q, n)
		require.NotContains(t, seen, q, "%s and %s share a queue", n, seen[q])
		seen[q] = n
	}
}

func TestDispatchTransportErrorHidesTheURL(t *testing.T) {
	t.Parallel()
	err := &url.Error{Op: "Post", URL: "http://n8n/webhook/abc?token=s3cr3t", Err: errors.New("dial tcp 10.0.0.1:5678: connect: connection refused")}
	require.Equal(t, "dial tcp 10.0.0.1:5678: connect: connection refused", transportError(err))
	require.Equal(t, "plain", transportError(errors.New("plain")))
}

func TestEventIDHashesOverlongProviderIDs(t *testing.T) {
	t.Parallel()
	id := func(s string) string { return eventID(verify.Event{ID: s}) }
	short := strings.Repeat("a", claim.MaxEventIDLen)
	require.Equal(t, short, id(short))
	long := short + "b"
	got := id(long)
	require.True(t, strings.HasPrefix(got, "sha256:"))
	require.LessOrEqual(t, len(got), claim.MaxEventIDLen)
	require.Equal(t, got, id(long), "stable, so redeliveries stay duplicates")
	require.NotEqual(t, got, id(short+"c"))
}

// A stand-in hash never equals a literal provider id: an id that itself
// looks like a stand-in is hashed too, so "inv\xff" and the literal text
// of its stand-in are two events, not one (the second would be a
// duplicate of the first and never run).
func TestEventIDStandInsNeverEqualLiteralIDs(t *testing.T) {
	t.Parallel()
	invalid := eventID(verify.Event{ID: "inv\xff"})
	require.True(t, strings.HasPrefix(invalid, "sha256:"))
	literal := eventID(verify.Event{ID: invalid})
	require.NotEqual(t, invalid, literal, "a provider id spelled like a stand-in is its own event")
	require.Equal(t, literal, eventID(verify.Event{ID: invalid}), "stable")
	for _, other := range []string{"inv\x00", strings.Repeat("z", claim.MaxEventIDLen+1), "sha256:", "sha256:x"} {
		require.NotEqual(t, invalid, eventID(verify.Event{ID: other}), "%q", other)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	require.Equal(t, digest, eventID(verify.Event{ID: digest, Digest: true}), "a verifier's own digest is kept")
	require.Equal(t, "cus_1", eventID(verify.Event{ID: "cus_1"}))
}

func TestFitIDHashesUnstorableIDs(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a\x00b", "\xff\xfe", strings.Repeat("x", claim.MaxObjectIDLen+1)} {
		got := fitID(id, claim.MaxObjectIDLen)
		require.True(t, strings.HasPrefix(got, "sha256:"), "%q", id)
		require.Equal(t, got, fitID(id, claim.MaxObjectIDLen), "stable")
	}
	require.Equal(t, "cus_1", fitID("cus_1", claim.MaxObjectIDLen))
	require.Equal(t, "ab", truncate("a\x00b", 10))
	require.Equal(t, "€", truncate("€€", 4), "never splits a UTF-8 sequence")
}

func TestHeaderSafeIDs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"evt_1NXj":           "evt_1NXj",
		"3:abc|2:de":         "3:abc|2:de",
		"Anmeldung Frühjahr": "Anmeldung Fr%C3%BChjahr",
		"a\nb":               "a%0Ab",
		"100% sure":          "100%25 sure",
		"Fr%C3%BC":           "Fr%25C3%25BC",
		" pad ":              "%20pad%20",
		"🎉":                  "%F0%9F%8E%89",
		"\x7f":               "%7F",
	} {
		require.Equal(t, want, headerSafe(in), "%q", in)
		require.Equal(t, want, forHeader(want), "%q: an encoded id is never encoded twice", in)
	}
	require.Equal(t, "Fr%C3%BCh", forHeader("Früh"), "a legacy id is encoded on the way out")
	// Through eventID: too long once encoded, or unstorable, is hashed.
	long := strings.Repeat("é", 400)
	require.True(t, strings.HasPrefix(eventID(verify.Event{ID: long}), "sha256:"))
	require.Equal(t, eventID(verify.Event{ID: long}), hashID(long), "hashed over the provider's bytes")
	require.Equal(t, "Anmeldung Fr%C3%BChjahr", eventID(verify.Event{ID: "Anmeldung Frühjahr"}))
}

// FuzzHeaderSafeInjective: two ids never share a header-safe form, and the
// form is printable ASCII that forHeader leaves alone.
func FuzzHeaderSafeInjective(f *testing.F) {
	for _, s := range [][2]string{{"Frühjahr", "Fr%C3%BChjahr"}, {"a b", "a%20b"}, {" a", "%20a"}, {"%", "%25"}, {"\n", "%0A"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ha, hb := headerSafe(a), headerSafe(b)
		if a != b && ha == hb {
			t.Fatalf("%q and %q share %q", a, b, ha)
		}
		if forHeader(ha) != ha {
			t.Fatalf("%q: forHeader changes the header-safe %q", a, ha)
		}
		for i := 0; i < len(ha); i++ {
			if c := ha[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("%q: byte %#x in %q", a, c, ha)
			}
		}
	})
}
