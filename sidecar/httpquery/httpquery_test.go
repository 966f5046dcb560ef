package httpquery_test

import (
	"net/url"
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

func TestFormOnce(t *testing.T) {
	for _, tc := range []struct {
		body, field string
		refused     bool
	}{
		{"confirm=yes&whole_window=yes", "", false},
		{"", "", false},
		{"whole_window=yes&whole_window=no", "whole_window", true},
		{"confirm=yes&whole_%77indow=yes&whole_window=no", "whole_window", true},
		{"csrf=a&csrf=a", "csrf", true},
		{"confirm=yes&confirm=&whole_window=x&whole_window=y", "confirm", true}, // the first in name order
		{"s3cr3t=a&s3cr3t=b", "", true},                                         // not a field of the form: named by none
	} {
		t.Run(tc.body, func(t *testing.T) {
			form, err := url.ParseQuery(tc.body)
			require.NoError(t, err)
			err = httpquery.FormOnce(form, "csrf", "confirm", "whole_window")
			if !tc.refused {
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
