package backfill

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		d    time.Duration
		ok   bool
		name string
	}{
		{"7", 7 * time.Second, true, "seconds"},
		{" 0 ", 0, true, "zero"},
		{"999999", 24 * time.Hour, true, "capped at a day"},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true, "HTTP-date"},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true, "date in the past"},
		{"", 0, false, "empty"},
		{"-3", 0, false, "negative"},
		{"soon", 0, false, "text"},
	} {
		d, ok := RetryAfter(tc.v, now)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.d, d, tc.name)
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "", "Sat, 05 Dec 2026 22:00:00 GMT", "-1", "18446744073709551616"} {
		f.Add(s)
	}
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := RetryAfter(v, now)
		if !ok && d != 0 {
			t.Fatalf("not ok with %v", d)
		}
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("out of range: %v", d)
		}
	})
}

// TestClientRateLimitBudget: waits add up to MaxWait at most; the next
// limit past it is ErrRateLimited, without waiting.
func TestClientRateLimitBudget(t *testing.T) {
	var slept []time.Duration
	c := &Client{MaxWait: 10 * time.Second, Jitter: func() float64 { return 0.5 }}
	h := http.Header{"Retry-After": {"7"}}
	d, ok := c.rateLimitWait(h, 1)
	require.True(t, ok)
	require.Equal(t, 7*time.Second, d)
	c.waited = d
	_, ok = c.rateLimitWait(h, 2)
	require.False(t, ok, "7 + 7 > 10")
	require.Empty(t, slept)
	// GitHub: no Retry-After, nothing remaining: until the reset.
	now := time.Unix(1_800_000_000, 0)
	g := &Client{MaxWait: time.Hour, GitHub: true, Now: func() time.Time { return now }}
	d, ok = g.rateLimitWait(http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1800000042"}}, 1)
	require.True(t, ok)
	require.Equal(t, 42*time.Second, d)
	require.True(t, g.rateLimited(http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"0"}}))
	require.False(t, g.rateLimited(http.StatusForbidden, http.Header{}), "a plain 403 is a refusal")
	// GitHub without any hint: at least a minute.
	d, ok = g.rateLimitWait(http.Header{}, 1)
	require.True(t, ok)
	require.GreaterOrEqual(t, d, time.Minute)
}

func TestLinkNext(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{`<https://api.github.com/x?cursor=a>; rel="next", <https://api.github.com/x?cursor=z>; rel="last"`}, "https://api.github.com/x?cursor=a"},
		{[]string{`<https://api.github.com/x?page=1>; rel="prev"`, `<https://api.github.com/x?page=3>; rel="next"`}, "https://api.github.com/x?page=3"},
		{[]string{`<https://a/x>; rel="prev next"`}, "https://a/x"},
		{[]string{`<https://a/x>; REL=next`}, "https://a/x"},
		{[]string{`<https://a/x>; rel="last"`}, ""},
		{[]string{`https://a/x; rel="next"`}, ""},
		{[]string{`<https://a/x`}, ""},
		{nil, ""},
	} {
		require.Equal(t, tc.want, LinkNext(tc.in), "%q", tc.in)
	}
}

func FuzzLinkNext(f *testing.F) {
	for _, s := range []string{`<https://a/x?c=1>; rel="next"`, `<a>; rel=next, <b>; rel="last"`, `<`, `<>;rel=`, `,,,`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := LinkNext([]string{v})
		if got != "" && !strings.Contains(v, "<"+got+">") {
			t.Fatalf("%q is not a link target of %q", got, v)
		}
	})
}
