package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Group commit as claimd saw it during a cell: the claimd_group_calls
// histogram of one kind, read from claimd's /metrics before and after.

// groupStats is a snapshot of claimd_group_calls{kind}.
type groupStats struct {
	groups, calls, singles float64
}

// sub is the cell's share: s less an earlier snapshot.
func (s groupStats) sub(before groupStats) groupStats {
	return groupStats{groups: s.groups - before.groups, calls: s.calls - before.calls, singles: s.singles - before.singles}
}

// String is "groups  mean calls/group  % of groups with one call".
func (s groupStats) String() string {
	if s.groups <= 0 {
		return fmt.Sprintf("%8s %8s %8s", "0", "-", "-")
	}
	return fmt.Sprintf("%8.0f %8.1f %7.0f%%", s.groups, s.calls/s.groups, 100*s.singles/s.groups)
}

// scrapeGroups reads claimd_group_calls{kind} from the sidecar's /metrics
// (served without authentication).
func (s *sidecar) scrapeGroups(ctx context.Context, kind string) (groupStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return groupStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return groupStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return groupStats{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return groupStats{}, fmt.Errorf("parse /metrics: %w", err)
	}
	return groupsOf(fams["claimd_group_calls"], kind), nil
}

// groupsOf picks kind's histogram out of the family (zero when absent).
func groupsOf(f *dto.MetricFamily, kind string) groupStats {
	if f == nil {
		return groupStats{}
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != "kind" || l.GetValue() != kind {
				continue
			}
			h := m.GetHistogram()
			st := groupStats{groups: float64(h.GetSampleCount()), calls: h.GetSampleSum()}
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == 1 {
					st.singles = float64(b.GetCumulativeCount())
				}
			}
			return st
		}
	}
	return groupStats{}
}
