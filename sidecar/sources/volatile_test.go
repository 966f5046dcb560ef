package sources

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVolatileFieldsLeaveTheHashOnly(t *testing.T) {
	t.Parallel()
	v, err := parseVolatile([]string{"/createdAt", "/meta/attempt", "/a~1b", "/items/0"})
	require.NoError(t, err)
	src := &Source{volatile: v}
	plain := &Source{}
	hash := func(s *Source, body string) string {
		h, err := s.receiptHash("application/json", []byte(body))
		require.NoError(t, err)
		return h
	}
	first := `{"event":"X","createdAt":"10:00","meta":{"attempt":1,"k":2},"a/b":1,"items":[1,2],"n":1.50}`
	retry := `{"n":1.5,"items":[9,2],"a/b":7,"meta":{"k":2,"attempt":2},"createdAt":"10:01","event":"X"}`
	require.Equal(t, hash(src, first), hash(src, retry), "only volatile fields differ")
	changed := `{"event":"Y","createdAt":"10:00","meta":{"attempt":1,"k":2},"a/b":1,"items":[1,2],"n":1.5}`
	require.NotEqual(t, hash(src, first), hash(src, changed), "other fields still count")
	require.NotEqual(t, hash(plain, first), hash(plain, retry), "without volatile fields they differ")
	form, err := src.receiptHash("application/x-www-form-urlencoded", []byte("not json"))
	require.NoError(t, err)
	require.Len(t, form, 64, "a form body is hashed over its raw bytes")

	_, err = parseVolatile([]string{"createdAt"})
	require.ErrorContains(t, err, "volatile_fields[0]")
}

func TestConfigErrorsNameFileFields(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`sources:
  doc:
    tenant: t
    provider: token
    secrets: ["x-secret-0123456789"]
    options: {header: X-Secret, key: {}}
    forward: {url: "http://127.0.0.1:9/x"}
`), func(string) string { return "" })
	require.Error(t, err)
	require.Contains(t, err.Error(), `source "doc": options.key.id_header`)
}
