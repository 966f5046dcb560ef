package httpquery_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
)

func TestOnce(t *testing.T) {
	for _, tc := range []struct {
		query, field string
	}{
		{"state=processing&source=a", ""},
		{"", ""},
		{"state=a&state=b", "state"},
		{"state=&state=s3cr3t", "state"},
		{"source=a&state=b&source=a", "source"},
		{"limit=1&limit", "limit"},
		{"other=1&other=2", ""}, // not a parameter of the route
		{"state=a&%73tate=b", "state"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var args fasthttp.Args
			args.Parse(tc.query)
			err := httpquery.Once(&args, "state", "source", "limit")
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var e *apperr.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, apperr.Malformed, e.Code)
			require.Equal(t, tc.field, e.Field)
			require.NotContains(t, e.Error(), "s3cr3t")
			require.NotContains(t, e.Message, "=")
		})
	}
}
