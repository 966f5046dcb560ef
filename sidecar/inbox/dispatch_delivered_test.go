package inbox_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Tests of forward.delivered_statuses: a non-2xx answer that means the
// target has the event already (n8n's 409 for a resume URL called a second
// time) is recorded as dispatched, never retried into a false dead letter,
// while a 409 that is a retry signal (a workflow's in_progress) is still
// retried. Real PostgreSQL, real River, a real HTTP target.

// n8n's 409 bodies for a resume URL whose execution is no longer waiting
// (packages/cli/src/webhooks/waiting-webhooks.ts, n8n 2.x).
const (
	n8nResumedFinished = `{"code":409,"message":"The execution \"4711 has finished already."}`
	n8nResumedRunning  = `{"code":409,"message":"The execution \"4711\" is running already."}`
	n8nResumedFailed   = `{"code":409,"message":"The execution \"4711\" has finished with error."}`
)

// TestDispatchResumeURL409IsDelivered: an n8n resume URL answers 409 once
// its execution was resumed; that is the event delivered, at the first
// answer (and after a 503 that hid an earlier resume), with the status and
// n8n's word for it in the delivery log; no retry, no dead letter.
func TestDispatchResumeURL409IsDelivered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body, word string
		first503               bool
	}{
		{"webhook-waiting finished", "/webhook-waiting/4711", n8nResumedFinished, " (n8n: finished)", false},
		{"webhook-waiting running", "/webhook-waiting/4711/approval", n8nResumedRunning, " (n8n: running)", false},
		{"form-waiting finished with error, under a prefix", "/n8n/form-waiting/4711", n8nResumedFailed, " (n8n: finished with error)", false},
		{"another body", "/webhook-waiting/4711", `{"message":"conflict"}`, "", false},
		{"after a 503", "/webhook-waiting/4711", n8nResumedRunning, " (n8n: running)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newDispatchBundle(t, tc.path, ", require_claim: false", func(_ *retryBundle, n int, _ *http.Request) (int, string) {
				if tc.first503 && n == 1 {
					return http.StatusServiceUnavailable, `{}`
				}
				return http.StatusConflict, tc.body
			})
			require.True(t, b.src.Forward.ResumeURL)
			require.Equal(t, sources.Statuses{{Lo: 409, Hi: 409}}, b.src.Forward.DeliveredStatuses)
			require.False(t, b.src.Forward.RetryStatuses.Has(409), "not retried by default for a resume URL")
			b.inbox = b.startInbox(t, true)
			id := b.receive(t, "evt-resume")
			retries := 0
			if tc.first503 {
				retries = 1
			}
			require.Equal(t, retries, b.waitEnd(t, "dispatched"))
			require.EqualValues(t, retries+1, b.hits.Load())
			v := b.row(t, id)
			require.Equal(t, "dispatched", v.state)
			require.Equal(t, retries+1, v.attempts)
			require.Equal(t, http.StatusConflict, *v.lastStatus)
			require.Empty(t, v.lastError)
			want := []logEntry{{"dispatched", retries + 1, "HTTP 409 from an n8n resume URL: the execution was resumed already" + tc.word}}
			if tc.first503 {
				want = append([]logEntry{{"dispatch_failed", 1, "target answered HTTP 503 (retryable for this source)"}}, want...)
			}
			require.Equal(t, want, b.dispatchLog(t, id))
		})
	}
}

// TestDispatchConfiguredDeliveredStatus: forward.delivered_statuses names
// the answers that mean "has it already" for any target: a 409 (and a 410)
// configured so is delivered at once, with require_claim too (the target's
// answer is the evidence); the same 410 not configured dead-letters at once.
func TestDispatchConfiguredDeliveredStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, forward string
		status        int
		end           string
		detail        string
	}{
		{"409 listed", ", delivered_statuses: [409]", 409, "dispatched", "HTTP 409: delivered already (in forward.delivered_statuses)"},
		{"410 listed", `, delivered_statuses: [409, "410"]`, 410, "dispatched", "HTTP 410: delivered already (in forward.delivered_statuses)"},
		{"410 not listed", "", 410, "dead_lettered", "target answered HTTP 410 (not retryable for this source: not in forward.retry_statuses)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newDispatchBundle(t, "/webhook/orders", tc.forward, func(*retryBundle, int, *http.Request) (int, string) {
				return tc.status, `{}`
			})
			require.False(t, b.src.Forward.ResumeURL)
			require.True(t, b.src.Forward.RequireClaim)
			b.inbox = b.startInbox(t, true)
			id := b.receive(t, "evt-delivered")
			require.Zero(t, b.waitEnd(t, tc.end), "no retry")
			require.EqualValues(t, 1, b.hits.Load())
			v := b.row(t, id)
			require.Equal(t, tc.end, v.state)
			require.Equal(t, tc.status, *v.lastStatus)
			outcome := "dispatched"
			if tc.end == "dead_lettered" {
				outcome = "dispatch_dead_lettered"
			}
			require.Equal(t, []logEntry{{outcome, 1, tc.detail}}, b.dispatchLog(t, id))
		})
	}
}

// TestDispatchRetryable409StillRetries: a 409 that is a retry signal — a
// workflow answering while another delivery holds the claim, on an
// ordinary webhook URL (the default list), or on a resume URL whose
// source lists 409 in retry_statuses — is retried, and the event is
// dispatched by the 2xx after it.
func TestDispatchRetryable409StillRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, path, forward string }{
		{"webhook URL, default list", "/webhook/orders", ""},
		{"resume URL, 409 in retry_statuses", "/webhook-waiting/4711", `, retry_statuses: [409, "500-599"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newDispatchBundle(t, tc.path, tc.forward, func(b *retryBundle, n int, r *http.Request) (int, string) {
				if n == 1 {
					return http.StatusConflict, `{"outcome":"in_progress"}`
				}
				return b.claimAndComplete(t, r)
			})
			require.True(t, b.src.Forward.RetryStatuses.Has(409))
			require.False(t, b.src.Forward.DeliveredStatuses.Has(409))
			b.inbox = b.startInbox(t, true)
			id := b.receive(t, "evt-409-retry")
			require.Equal(t, 1, b.waitEnd(t, "dispatched"))
			require.EqualValues(t, 2, b.hits.Load())
			require.EqualValues(t, 1, b.effects.Load())
			require.Equal(t, []logEntry{
				{"dispatch_failed", 1, "target answered HTTP 409 (retryable for this source)"},
				{"dispatched", 2, "HTTP 200"},
			}, b.dispatchLog(t, id))
		})
	}
}

// TestSourcesFileDeliveredStatuses: which URLs are n8n resume URLs, how
// the two lists' defaults give way to each other, and the errors.
func TestSourcesFileDeliveredStatuses(t *testing.T) {
	t.Parallel()
	parse := func(url, extra string) (*sources.Source, error) {
		cfg, err := sources.Parse([]byte("sources:\n  gh: {tenant: acme, provider: github, secrets: [s], forward: {url: \""+url+"\""+extra+"}}\n"), envOf(nil))
		if err != nil {
			return nil, err
		}
		return cfg.Sources["gh"], nil
	}
	for url, resume := range map[string]bool{
		"http://n8n:5678/webhook-waiting/4711":                  true,
		"http://n8n:5678/webhook-waiting/4711/approval?x=1":     true,
		"https://n8n.example/form-waiting/88":                   true,
		"https://example.com/n8n/webhook-waiting/88":            true,
		"http://n8n:5678/webhook/orders":                        false,
		"http://n8n:5678/webhook-waiting/":                      false,
		"http://n8n:5678/webhook/x?next=/webhook-waiting/4711":  false,
		"http://n8n:5678/my-webhook-waiting/4711":               false,
		"http://webhook-waiting:5678/webhook/orders":            false,
		"http://n8n:5678/webhook-test/form-waiting-preview/abc": false,
	} {
		src, err := parse(url, "")
		require.NoError(t, err, url)
		require.Equal(t, resume, src.Forward.ResumeURL, url)
		require.Equal(t, resume, src.Forward.DeliveredStatuses.Has(409), url)
		require.Equal(t, !resume, src.Forward.RetryStatuses.Has(409), url)
		require.True(t, src.Forward.RetryStatuses.Has(503), url)
	}

	src, err := parse("http://n8n/webhook-waiting/1", ", delivered_statuses: []")
	require.NoError(t, err)
	require.Nil(t, src.Forward.DeliveredStatuses, "an empty list turns the resume URL default off")
	require.Equal(t, sources.DefaultRetryStatuses(), src.Forward.RetryStatuses)

	src, err = parse("http://n8n/webhook/x", `, delivered_statuses: ["409-410"]`)
	require.NoError(t, err)
	require.Equal(t, sources.Statuses{{Lo: 409, Hi: 410}}, src.Forward.DeliveredStatuses)
	require.Equal(t, "404, 408, 425, 429, 500-599", src.Forward.RetryStatuses.String(), "the default retries less the delivered")

	for _, tc := range []struct{ extra, want string }{
		{`, retry_statuses: [409], delivered_statuses: [409]`, "forward.delivered_statuses: 409 is in forward.retry_statuses too"},
		{`, retry_statuses: ["400-499"], delivered_statuses: [409]`, "forward.delivered_statuses: 409 is in forward.retry_statuses too"},
		{`, delivered_statuses: [200]`, "forward.delivered_statuses[0]: 200 includes a 2xx"},
		{`, delivered_statuses: [409, 700]`, "forward.delivered_statuses[1]: 700 is not an HTTP status (100-599)"},
		{`, delivered_statuses: 409`, "forward.delivered_statuses must be a list, such as [409]"},
		{`, retry_statuses: []`, "forward.retry_statuses is empty"},
	} {
		_, err := parse("http://n8n/webhook-waiting/1", tc.extra)
		require.ErrorContains(t, err, tc.want, tc.extra)
	}
}
