package sources_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// The sources file sets both retentions per source (case B21): the
// payload retention (retention_days) and the key retention
// (key_retention_days), which defaults to 400 days, never below the
// payload retention, and may not be set below it.
func TestSourcesFileKeyRetention(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	cfg, err := sources.Parse([]byte(`
sources:
  svix: {tenant: acme, provider: standard-webhooks, secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], retention_days: 30, key_retention_days: 120, `+fwd+`}
  stripe: {tenant: acme, provider: stripe, secrets: ["whsec_x"], `+fwd+`}
  archive: {retention_days: 500}
`), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, 30*day, cfg.Policies["svix"].Retention)
	require.Equal(t, 120*day, cfg.Policies["svix"].KeyRetention)
	ps := claim.Policies{BySource: cfg.Policies}.WithDefaults()
	require.NoError(t, ps.Validate())
	require.Equal(t, 120*day, ps.For("svix").KeyRetention)
	require.Equal(t, 30*day, ps.For("stripe").Retention)
	require.Equal(t, 400*day, ps.For("stripe").KeyRetention, "the default covers every provider's resend window")
	require.Equal(t, 500*day, ps.For("archive").KeyRetention, "never below the source's payload retention")

	cfg, err = sources.Parse([]byte(`
sources:
  svix: {tenant: acme, provider: standard-webhooks, secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], retention_days: 90, key_retention_days: 60, `+fwd+`}
`), envOf(nil))
	require.NoError(t, err, "Parse reads; the policies are validated with the defaults filled in")
	err = claim.Policies{BySource: cfg.Policies}.WithDefaults().Validate()
	require.EqualError(t, err, `source "svix": key_retention_days (60) cannot be shorter than retention_days (90): `+
		`the key must outlive the payload, or a resend after the purge is taken for a new event`)

	// Sources sharing a dedupe scope share one key space, so one key
	// retention.
	_, err = sources.Parse([]byte(`
sources:
  a: {tenant: t, provider: github, secrets: [s1], dedupe_scope: shop, key_retention_days: 100, `+fwd+`}
  b: {tenant: t, provider: github, secrets: [s2], dedupe_scope: shop, key_retention_days: 200, `+fwd+`}
`), envOf(nil))
	require.ErrorContains(t, err, `dedupe_scope "shop"`)
	require.ErrorContains(t, err, "claim policy")
}
