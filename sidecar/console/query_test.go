package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The console refuses a query parameter given twice with its 400 page
// naming the parameter and quoting none of the values: the claims list,
// the record page and the source page (its range and its backfill
// section's scan, scans_before and events_before). Each once, the page is
// shown.
func TestConsoleRepeatedQueryParameterRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	won := e.claim(t, tenantA, "stripe", "evt_query")
	b := e.browser(t)
	b.signIn(keyA)

	for path, field := range map[string]string{
		"/ui/claims?state=processing&state=zq9value":                "state",
		"/ui/claims?source=stripe&source=zq9value":                  "source",
		"/ui/claims?event_id_prefix=evt&event_id_prefix=zq9value":   "event_id_prefix",
		"/ui/claims?from=2026-01-01T00:00&from=zq9value":            "from",
		"/ui/claims?limit=1&limit=2":                                "limit",
		"/ui/claims/" + won.ID + "?done=resolve&done=zq9value":      "done",
		"/ui/sources/stripe?range=24h&range=zq9value":               "range",
		"/ui/sources/stripe?scan=queued&scan=zq9value":              "scan",
		"/ui/sources/stripe?scans_before=3&scans_before=zq9value":   "scans_before",
		"/ui/sources/stripe?events_before=&events_before=zq9value":  "events_before",
		"/ui/sources/stripe?range=7d&scan=queued&scan=":             "scan",
		"/ui/claims?time_field=created&time_field=updated&to=&to=x": "time_field",
	} {
		r := b.get(path)
		require.Equal(t, http.StatusBadRequest, r.status, path)
		require.Equal(t, []string{field}, texts(r.body, "error-field"), path)
		require.NotContains(t, withoutToken(r.body), "zq9value", path)
	}
	for _, path := range []string{"/ui/claims?state=processing&source=stripe&limit=1", "/ui/claims/" + won.ID + "?done=resolve",
		"/ui/sources/stripe?range=7d", "/ui/sources/stripe?range=7d&scan=queued&scans_before=3"} {
		require.Equal(t, http.StatusOK, b.get(path).status, path)
	}
}
