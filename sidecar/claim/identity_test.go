package claim_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
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

// exactDepartures are the RFC 8785 vectors whose input spells a number with
// more digits than its IEEE-754 double keeps: JCS rounds it, the exact
// canonical form keeps the value as written (see strictjson).
var exactDepartures = map[string][2]string{
	"values": {"333333333.3333333,", "333333333.33333329,"},
}

func TestCanonicalMatchesRFC8785Vectors(t *testing.T) {
	t.Parallel()
	for name, v := range rfc8785Vectors(t) {
		got, err := claim.Canonical([]byte(v.Input))
		require.NoError(t, err, name)
		if d, ok := exactDepartures[name]; ok {
			require.Contains(t, v.Canonical, d[0], name)
			v.Canonical = strings.Replace(v.Canonical, d[0], d[1], 1)
			sum := sha256.Sum256([]byte(v.Canonical))
			v.SHA256 = hex.EncodeToString(sum[:])
		}
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

// identityCases are the inputs of the issue "Exact event identity": pairs
// that must never share a key, and spellings that must.
var identityCases = []string{
	`{"order_id":9007199254740993,"status":"paid"}`, `{"order_id":9007199254740992,"status":"paid"}`,
	`{"n":9223372036854775807}`, `{"n":9223372036854775808}`, `{"n":9223372036854775809}`,
	`{"n":1e30}`, `{"n":1000000000000000000000000000001}`, `{"n":-0}`, `{"n":0}`, `{"n":1.0}`, `{"n":1}`,
	`{"n":1e2}`, `{"n":100}`, `{"s":"inv\ufffd"}`, `{"s":"inv\ud83d\ude00"}`, `{"s":"A\u030a"}`, `{"s":"\u00c5"}`,
	`{"a:b":"c"}`, `{"a":"b:c"}`, `{"id":"x","Id":"y"}`, `{"id":"1"}`, `{"id":1}`,
}

// FuzzHashedEventIDInjective: two key_fields documents that give one event
// id hold the same value (numbers compared exactly); any identity-relevant
// difference gives another id.
func FuzzHashedEventIDInjective(f *testing.F) {
	for i, a := range identityCases {
		f.Add([]byte(a), []byte(identityCases[(i+1)%len(identityCases)]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ia, err := claim.HashedEventID(a)
		if err != nil {
			return
		}
		ib, err := claim.HashedEventID(b)
		if err != nil || ia != ib {
			return
		}
		ca, _ := claim.Canonical(a)
		cb, _ := claim.Canonical(b)
		if !sameJSONValue(t, ca, cb) {
			t.Fatalf("%q and %q share event id %s", a, b, ia)
		}
	})
}

// sameJSONValue compares two JSON documents by exact value: numbers as
// rationals, strings by their code points, objects as sets of members.
func sameJSONValue(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	for _, p := range []struct {
		raw []byte
		dst *any
	}{{a, &va}, {b, &vb}} {
		dec := json.NewDecoder(bytes.NewReader(p.raw))
		dec.UseNumber()
		if err := dec.Decode(p.dst); err != nil {
			t.Fatalf("canonical output %q does not parse: %v", p.raw, err)
		}
	}
	return equalValues(va, vb)
}

func equalValues(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalValues(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalValues(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	}
	return a == b
}

func TestHashedEventIDKeepsIdentityCasesApart(t *testing.T) {
	t.Parallel()
	ids := map[string]string{}
	for _, c := range identityCases {
		id, err := claim.HashedEventID([]byte(c))
		require.NoError(t, err, c)
		if other, dup := ids[id]; dup {
			ca, _ := claim.Canonical([]byte(c))
			co, _ := claim.Canonical([]byte(other))
			require.True(t, sameJSONValue(t, ca, co), "%s and %s share a key", c, other)
		}
		ids[id] = c
	}
	require.Len(t, ids, len(identityCases)-3, "exactly the three equal spellings (-0 and 0, 1.0 and 1, 1e2 and 100) collapse")
}
