package sources

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

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
	require.Equal(t, "ab", Truncate("a\x00b", 10))
	require.Equal(t, "€", Truncate("€€", 4), "never splits a UTF-8 sequence")
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
		require.Equal(t, want, HeaderValue(want), "%q: an encoded id is never encoded twice", in)
	}
	require.Equal(t, "Fr%C3%BCh", HeaderValue("Früh"), "a legacy id is encoded on the way out")
	// Through eventID: too long once encoded, or unstorable, is hashed.
	long := strings.Repeat("é", 400)
	require.True(t, strings.HasPrefix(eventID(verify.Event{ID: long}), "sha256:"))
	require.Equal(t, eventID(verify.Event{ID: long}), hashID(long), "hashed over the provider's bytes")
	require.Equal(t, "Anmeldung Fr%C3%BChjahr", eventID(verify.Event{ID: "Anmeldung Frühjahr"}))
}

// FuzzHeaderSafeInjective: two ids never share a header-safe form, and the
// form is printable ASCII that HeaderValue leaves alone.
func FuzzHeaderSafeInjective(f *testing.F) {
	for _, s := range [][2]string{{"Frühjahr", "Fr%C3%BChjahr"}, {"a b", "a%20b"}, {" a", "%20a"}, {"%", "%25"}, {"\n", "%0A"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ha, hb := headerSafe(a), headerSafe(b)
		if a != b && ha == hb {
			t.Fatalf("%q and %q share %q", a, b, ha)
		}
		if HeaderValue(ha) != ha {
			t.Fatalf("%q: HeaderValue changes the header-safe %q", a, ha)
		}
		for i := 0; i < len(ha); i++ {
			if c := ha[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("%q: byte %#x in %q", a, c, ha)
			}
		}
	})
}
