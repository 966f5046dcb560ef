package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A query parameter given twice is refused, 400 malformed naming it and
// quoting none of its values, on every /v1 route that reads parameters:
// the lookup by key and the list (by state and by execution). The same
// request with each parameter once is answered.
func TestRepeatedQueryParameterRefused(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, expirySources, ingestOptions{})
	a := e.apiPost(t, "/v1/claims", `{"source":"kept","event_id":"q-1","execution_id":"EXQ"}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)

	for _, tc := range []struct{ path, field string }{
		{"/v1/claims?source=kept&event_id=q-1&source=v4lue-one", "source"},
		{"/v1/claims?source=kept&event_id=q-1&event_id=v4lue-one", "event_id"},
		{"/v1/claims?source=kept&event_id=q-1&action=&action=v4lue-one", "action"},
		{"/v1/claims/list?state=processing&state=v4lue-one", "state"},
		{"/v1/claims/list?state=processing&source=kept&source=v4lue-one", "source"},
		{"/v1/claims/list?state=processing&limit=1&limit=2", "limit"},
		{"/v1/claims/list?state=processing&cursor=v4lue-one&cursor=v4lue-two", "cursor"},
		{"/v1/claims/list?execution_id=EXQ&execution_id=v4lue-one", "execution_id"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			a := e.api(t, http.MethodGet, tc.path)
			require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
			var ans struct {
				Error struct {
					Code  string `json:"code"`
					Field string `json:"field"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(a.body, &ans), "%s", a.body)
			require.Equal(t, "malformed", ans.Error.Code)
			require.Equal(t, tc.field, ans.Error.Field)
			require.NotContains(t, string(a.body), "v4lue")
			require.NotContains(t, string(a.body), "kept")
		})
	}
	for _, path := range []string{"/v1/claims?source=kept&event_id=q-1", "/v1/claims/list?state=processing&source=kept&limit=1",
		"/v1/claims/list?execution_id=EXQ", "/v1/claims?source=kept&event_id=q-1&unknown=1&unknown=2"} {
		a := e.api(t, http.MethodGet, path)
		require.Equal(t, http.StatusOK, a.status, "%s: %s", path, a.body)
	}
}
