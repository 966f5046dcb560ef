package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// The documented defaults of the connection bounds and the ingest body
// budget's shares and rate are the HTTP layer's, and each setting is
// validated by its name.
func TestEdgeSettings(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db"}
	c, err := config.Load(nil, func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, httpapi.DefaultMaxConnections, c.MaxConnections)
	require.Equal(t, httpapi.DefaultMaxConnsPerIP, c.MaxConnsPerIP)
	require.Equal(t, httpapi.DefaultIngestAddressSharePercent, c.IngestAddressSharePercent)
	require.Equal(t, httpapi.DefaultIngestSourceSharePercent, c.IngestSourceSharePercent)
	require.Equal(t, int64(httpapi.DefaultIngestMinBodyRate), c.IngestMinBodyRate)
	require.Equal(t, httpapi.DefaultIngestBodyGrace, c.IngestBodyGrace)

	c, err = config.Load(map[string]string{"CLAIMD_MAX_CONNS_PER_IP": "0", "CLAIMD_INGEST_ADDRESS_SHARE_PERCENT": "100",
		"CLAIMD_INGEST_SOURCE_SHARE_PERCENT": "1", "CLAIMD_INGEST_MIN_BODY_RATE_BYTES": "1",
		"CLAIMD_INGEST_BODY_GRACE_SECONDS": "30"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Zero(t, c.MaxConnsPerIP, "0 is no bound")
	require.Equal(t, 30*time.Second, c.IngestBodyGrace)

	for args, msg := range map[[2]string]string{
		{"CLAIMD_MAX_CONNS_PER_IP", "-1"}:               "CLAIMD_MAX_CONNS_PER_IP cannot be negative (0 = no bound)",
		{"CLAIMD_MAX_CONNS_PER_IP", "lots"}:             `CLAIMD_MAX_CONNS_PER_IP must be an integer`,
		{"CLAIMD_INGEST_ADDRESS_SHARE_PERCENT", "0"}:    "CLAIMD_INGEST_ADDRESS_SHARE_PERCENT must be between 1 and 100, got 0",
		{"CLAIMD_INGEST_ADDRESS_SHARE_PERCENT", "101"}:  "CLAIMD_INGEST_ADDRESS_SHARE_PERCENT must be between 1 and 100, got 101",
		{"CLAIMD_INGEST_SOURCE_SHARE_PERCENT", "0"}:     "CLAIMD_INGEST_SOURCE_SHARE_PERCENT must be between 1 and 100, got 0",
		{"CLAIMD_INGEST_SOURCE_SHARE_PERCENT", "half"}:  `CLAIMD_INGEST_SOURCE_SHARE_PERCENT must be an integer`,
		{"CLAIMD_INGEST_MIN_BODY_RATE_BYTES", "0"}:      "CLAIMD_INGEST_MIN_BODY_RATE_BYTES must be at least 1, got 0",
		{"CLAIMD_INGEST_BODY_GRACE_SECONDS", "0"}:       "CLAIMD_INGEST_BODY_GRACE_SECONDS must be at least 1",
		{"CLAIMD_INGEST_BODY_GRACE_SECONDS", "1.5"}:     `CLAIMD_INGEST_BODY_GRACE_SECONDS must be an integer`,
		{"CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT", "65535"}: "CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT must be at least 65536, got 65535",
	} {
		_, err := config.Load(map[string]string{args[0]: args[1]}, func(k string) string { return env[k] })
		require.EqualError(t, err, msg, args)
	}
}
