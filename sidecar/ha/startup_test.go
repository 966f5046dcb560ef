package ha

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// Before the schema is known to be current, the pool refuses requests
// (503, Unavailable, retryable) and lets the start-up and readiness
// checks through.
func TestStartupGate(t *testing.T) {
	t.Parallel()
	g := &Gate{}
	ok, err := g.Prepare(context.Background(), nil)
	require.True(t, ok, "the connection stays in the pool")
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(err))
	require.True(t, db.Retryable(err))
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(db.Error(err)))
	g.SetReason("the database is a standby")
	_, err = g.Prepare(context.Background(), nil)
	require.Contains(t, apperr.As(err).Message, "claimd is starting: the database is a standby")
	_, err = g.Prepare(Internal(context.Background()), nil)
	require.NoError(t, err)
	g.Open()
	_, err = g.Prepare(context.Background(), nil)
	require.NoError(t, err)
}
