package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The hash section calls the claims API's and ingest's payload hash on its
// documents; at the smallest budget it still prints every line.
func TestHashSectionRuns(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, runHash(&out, 0))
	o := out.String()
	for _, line := range []string{"claim.PayloadHash", "records 1 MiB", "3 volatile", "as a claim", "floats 4 MiB", "8 at once", "Go heap peak"} {
		require.Contains(t, o, line)
	}
	s, err := parseFlags([]string{"-hash-only"})
	require.NoError(t, err)
	require.True(t, s.hashOnly)
}
