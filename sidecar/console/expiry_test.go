package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The record page says until when the key is kept: the date of
// claim.Ledger.KeyExpiry, exact for a terminal record, "not before" for an
// open one, and that a resend after it is a new event.
func TestRecordPageShowsKeyExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	asked := time.Now()
	won := e.claim(t, tenantA, "stripe", "evt_kept")
	b := e.browser(t)
	b.signIn(keyA)

	r := b.get("/ui/claims/" + won.ID)
	require.Equal(t, http.StatusOK, r.status, e.logs.String())
	require.Contains(t, r.body, `data-key-expiry="not_before"`)
	got := texts(r.body, "field-key_expires_at")
	require.Len(t, got, 1)
	rest, ok := strings.CutPrefix(got[0], "not before ")
	require.True(t, ok, "an open record: %q", got[0])
	when, _, ok := strings.Cut(rest, " (")
	require.True(t, ok, "%q", got[0])
	at, err := time.Parse("2006-01-02 15:04:05Z", when)
	require.NoError(t, err)
	require.False(t, at.Before(asked.Add(claim.DefaultKeyRetention).Truncate(time.Second)),
		"not before now + the default key retention")
	require.Equal(t, won.UpdatedAt.Add(claim.DefaultKeyRetention).UTC().Format("2006-01-02 15:04:05Z"), when,
		"the record's last change + the key retention, as the API names it")
	require.True(t, strings.HasSuffix(got[0], "(a resend after that is a new event)"), "%q", got[0])

	done, err := e.ledger.Complete(e.ctx, tenantA, won.ID, won.Token, "ref")
	require.NoError(t, err)
	r = b.get("/ui/claims/" + won.ID)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `data-key-expiry="fixed"`)
	want := done.UpdatedAt.Add(claim.DefaultKeyRetention).UTC().Format("2006-01-02 15:04:05Z") +
		" (a resend after that is a new event)"
	require.Equal(t, []string{want}, texts(r.body, "field-key_expires_at"), "a completed record: updated_at + key retention")
}
