package main

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func TestGroupsOfReadsOneKindsHistogram(t *testing.T) {
	text := `# HELP claimd_group_calls Calls decided together.
# TYPE claimd_group_calls histogram
claimd_group_calls_bucket{kind="claim",le="1"} 3
claimd_group_calls_bucket{kind="claim",le="2"} 5
claimd_group_calls_bucket{kind="claim",le="+Inf"} 10
claimd_group_calls_sum{kind="claim"} 40
claimd_group_calls_count{kind="claim"} 10
claimd_group_calls_bucket{kind="settle",le="1"} 1
claimd_group_calls_bucket{kind="settle",le="+Inf"} 1
claimd_group_calls_sum{kind="settle"} 1
claimd_group_calls_count{kind="settle"} 1
`
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	before := groupStats{groups: 4, calls: 10, singles: 1}
	got := groupsOf(fams["claimd_group_calls"], "claim").sub(before)
	require.Equal(t, groupStats{groups: 6, calls: 30, singles: 2}, got)
	require.Equal(t, "       6      5.0      33%", got.String())
	require.Equal(t, groupStats{}, groupsOf(fams["claimd_group_calls"], "ingest"))
	require.Equal(t, groupStats{}, groupsOf(nil, "claim"))
}
