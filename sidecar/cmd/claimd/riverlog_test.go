package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// River's records reach claimd's log: JSON, component river, warnings and
// errors (debug only when claimd logs at debug), errors as their message,
// never a payload, job arguments or metadata.
func TestRiverLoggerBridgesToZerolog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := riverLogger(zerolog.New(&buf).Level(zerolog.InfoLevel).With().Str("service", "claimd").Logger())
	l.Info("producer: started")
	l.Error("notifier.Notifier: Error from notification wait", "err", errors.New("unexpected EOF"),
		"payload", `{"secret":"x"}`, "args", `{"claim_id":"1"}`, "queue", "default")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, "info left out: %s", buf.String())
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &m))
	require.Equal(t, "error", m["level"])
	require.Equal(t, "river", m["component"])
	require.Equal(t, "claimd", m["service"])
	require.Equal(t, "unexpected EOF", m["err"])
	require.Equal(t, "default", m["queue"])
	require.Equal(t, "notifier.Notifier: Error from notification wait", m["message"])
	require.NotContains(t, buf.String(), "secret")
	require.NotContains(t, m, "payload")
	require.NotContains(t, m, "args")

	buf.Reset()
	riverLogger(zerolog.New(&buf).Level(zerolog.DebugLevel)).Debug("elector: attempting to gain leadership")
	require.Contains(t, buf.String(), "attempting to gain leadership")
}
