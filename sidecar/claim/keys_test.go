package claim_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// rfc8785Vectors reads case C23: the RFC 8785 published test data
// (cyberphone/json-canonicalization testdata), input and canonical output.
func rfc8785Vectors(t testing.TB) map[string]struct {
	Input     string `json:"input"`
	Canonical string `json:"canonical"`
	SHA256    string `json:"sha256_canonical"`
} {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "verify", "testdata", "cases", "cases.json"))
	require.NoError(t, err)
	var cases []struct {
		ID     string `json:"id"`
		Vector struct {
			Files map[string]struct {
				Input     string `json:"input"`
				Canonical string `json:"canonical"`
				SHA256    string `json:"sha256_canonical"`
			} `json:"files"`
		} `json:"vector"`
	}
	require.NoError(t, json.Unmarshal(b, &cases))
	for _, c := range cases {
		if c.ID == "C23" {
			require.NotEmpty(t, c.Vector.Files)
			return c.Vector.Files
		}
	}
	t.Fatal("case C23 not found")
	return nil
}

func TestCanonicalMatchesRFC8785Vectors(t *testing.T) {
	t.Parallel()
	for name, v := range rfc8785Vectors(t) {
		got, err := claim.Canonical([]byte(v.Input))
		require.NoError(t, err, name)
		require.Equal(t, v.Canonical, string(got), name)
		h, err := claim.PayloadHash([]byte(v.Input))
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(v.Canonical))
		require.Equal(t, hex.EncodeToString(sum[:]), h, "%s: the hash is over the canonical bytes", name)
		if v.SHA256 != "" {
			require.Equal(t, v.SHA256, h, name)
		}
		again, err := claim.PayloadHash([]byte(v.Canonical))
		require.NoError(t, err)
		require.Equal(t, h, again, "%s: pretty and canonical forms hash the same", name)
	}
}

func TestPayloadHashDoesNotNormaliseUnicode(t *testing.T) {
	t.Parallel()
	decomposed, err := claim.HashedEventID([]byte(`{"Unnormalized Unicode":"A\u030a"}`))
	require.NoError(t, err)
	precomposed, err := claim.HashedEventID([]byte(`{"Unnormalized Unicode":"\u00c5"}`))
	require.NoError(t, err)
	require.NotEqual(t, decomposed, precomposed)
	_, err = claim.PayloadHash([]byte(`{"a":`))
	require.Error(t, err)
}

func TestCompositeEventIDIsUnambiguous(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, claim.CompositeEventID("a:b", "c"), claim.CompositeEventID("a", "b:c"))
	require.NotEqual(t, claim.CompositeEventID("a|1:b"), claim.CompositeEventID("a", "b"))
	require.NotEqual(t, claim.CompositeEventID(""), claim.CompositeEventID("", ""))
	require.Equal(t, "3:abc|2:de", claim.CompositeEventID("abc", "de"))
}

func FuzzCompositeEventIDInjective(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "|", "|", "")
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		if a1 == b1 && a2 == b2 {
			return
		}
		if claim.CompositeEventID(a1, a2) == claim.CompositeEventID(b1, b2) {
			t.Fatalf("(%q,%q) and (%q,%q) collide", a1, a2, b1, b2)
		}
	})
}

func FuzzPayloadHashStableUnderCanonicalisation(f *testing.F) {
	for _, v := range rfc8785Vectors(f) {
		f.Add([]byte(v.Input))
	}
	f.Add([]byte(`{"b":1,"a":[1.0,2e0,"x"]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := claim.Canonical(raw)
		if err != nil {
			return
		}
		c2, err := claim.Canonical(c)
		if err != nil {
			t.Fatalf("canonical output does not parse: %v", err)
		}
		if string(c) != string(c2) {
			t.Fatalf("canonicalisation is not idempotent: %q vs %q", c, c2)
		}
	})
}
