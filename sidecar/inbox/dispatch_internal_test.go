package inbox

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDispatchBackoffIsFullJitterUnderTheCap(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, 10*time.Second
	for attempt, ceiling := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: limit, 80: limit, 5000: limit} {
		require.Equal(t, ceiling, backoff(base, limit, attempt, 1), "attempt %d", attempt)
		require.Equal(t, ceiling/2, backoff(base, limit, attempt, 0.5), "attempt %d", attempt)
		require.Zero(t, backoff(base, limit, attempt, 0), "attempt %d", attempt)
	}
}

func TestDispatchRetryAfterParsing(t *testing.T) {
	t.Parallel()
	require.Equal(t, 3*time.Second, retryAfter("3"))
	require.Equal(t, 3*time.Second, retryAfter(" 3 "))
	require.Zero(t, retryAfter(""))
	require.Zero(t, retryAfter("-1"))
	require.Zero(t, retryAfter("soon"))
	require.Equal(t, time.Hour, retryAfter("999999"), "capped at an hour")
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	d := retryAfter(future)
	require.Positive(t, d)
	require.LessOrEqual(t, d, 90*time.Second)
	require.Zero(t, retryAfter(time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)), "a past date means now")
}

func TestDispatchTransportErrorHidesTheURL(t *testing.T) {
	t.Parallel()
	err := &url.Error{Op: "Post", URL: "http://n8n/webhook/abc?token=s3cr3t", Err: errors.New("dial tcp 10.0.0.1:5678: connect: connection refused")}
	require.Equal(t, "dial tcp 10.0.0.1:5678: connect: connection refused", transportError(err))
	require.Equal(t, "plain", transportError(errors.New("plain")))
}
