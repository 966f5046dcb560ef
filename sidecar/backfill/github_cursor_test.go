package backfill

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGitHubCursorResume: a stored list position is followed only as a
// delivery list of the configured hook id under the API's base path, on
// the API's own origin; it is stored as path and query only, and not at
// all when its query names a credential.
func TestGitHubCursorResume(t *testing.T) {
	base, err := url.Parse("https://ghe.example/api/v3")
	require.NoError(t, err)
	l := &githubLister{base: base, hook: "repos/acme/shop/hooks/7", hookID: "7"}

	for _, c := range []string{
		"/api/v3/repos/acme/shop/hooks/7/deliveries?per_page=100&cursor=v1_123",
		"/api/v3/repositories/42/hooks/7/deliveries?cursor=v1_123",
	} {
		u, ok := l.resume(c)
		require.True(t, ok, c)
		require.Equal(t, "https://ghe.example"+c, u)
	}
	for _, c := range []string{
		"//evil.example/api/v3/repos/acme/shop/hooks/7/deliveries?cursor=v1_1",
		"https://evil.example/api/v3/repos/acme/shop/hooks/7/deliveries?cursor=v1_1",
		"/api/v3/repos/acme/shop/hooks/8/deliveries?cursor=v1_1",
		"/repos/acme/shop/hooks/7/deliveries?cursor=v1_1",
		"/api/v3/../v4/repos/acme/shop/hooks/7/deliveries?cursor=v1_1",
		"/api/v3/repos/acme/shop/hooks/7/deliveries/1/attempts?cursor=v1_1",
		"api/v3/repos/acme/shop/hooks/7/deliveries?cursor=v1_1",
	} {
		_, ok := l.resume(c)
		require.False(t, ok, c)
	}

	require.Equal(t, "/api/v3/repositories/42/hooks/7/deliveries?cursor=v1_9",
		l.cursorOf("https://ghe.example/api/v3/repositories/42/hooks/7/deliveries?cursor=v1_9"))
	require.Equal(t, "", l.cursorOf("https://ghe.example/api/v3/repos/acme/shop/hooks/7/deliveries?cursor=v1_9&access_token=x"))
}
