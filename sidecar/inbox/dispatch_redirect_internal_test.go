package inbox

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDispatchRedirectReasonNamesTheLocationWithoutSecrets(t *testing.T) {
	t.Parallel()
	const fwd = "http://hook-user:hook-pass@n8n:5678/webhook/abc?token=fwd-secret"
	for _, tc := range []struct {
		location, want string
	}{
		{"https://n8n:5678/webhook/abc", "HTTP 301 redirect to https://n8n:5678/webhook/abc (another origin) — fix forward.url"},
		{"/webhook/abc/", "HTTP 301 redirect to http://n8n:5678/webhook/abc/ — fix forward.url"},
		{"http://N8N:5678/webhook/new?token=loc-secret#frag", "HTTP 301 redirect to http://N8N:5678/webhook/new — fix forward.url"},
		{"http://u:loc-pass@other.example/x?sig=loc-secret", "HTTP 301 redirect to http://other.example/x (another origin) — fix forward.url"},
		{"//other.example:5678/x", "HTTP 301 redirect to http://other.example:5678/x (another origin) — fix forward.url"},
		{"", "HTTP 301 redirect without a Location — fix forward.url"},
		{"http://[::1", "HTTP 301 redirect to an unparsable Location — fix forward.url"},
		{"/" + strings.Repeat("p", 1000), "HTTP 301 redirect to http://n8n:5678/ppp"},
	} {
		got := redirectReason(fwd, 301, tc.location)
		require.Contains(t, got, tc.want, tc.location)
		require.Contains(t, got, "redirects are not followed", tc.location)
		for _, secret := range []string{"secret", "pass", "hook-user", "frag"} {
			require.NotContains(t, got, secret, tc.location)
		}
		require.Less(t, len(got), maxLocationLen+300, "bounded")
	}
}

func TestDispatchSameOrigin(t *testing.T) {
	t.Parallel()
	u := func(s string) *url.URL {
		p, err := url.Parse(s)
		require.NoError(t, err)
		return p
	}
	require.True(t, sameOrigin(u("http://n8n/a"), u("http://N8N:80/b")))
	require.True(t, sameOrigin(u("https://n8n/a"), u("https://n8n:443/b")))
	require.False(t, sameOrigin(u("http://n8n/a"), u("https://n8n/a")), "scheme")
	require.False(t, sameOrigin(u("http://n8n:5678/a"), u("http://n8n:5679/a")), "port")
	require.False(t, sameOrigin(u("http://n8n/a"), u("http://n8n.evil/a")), "host")
}
