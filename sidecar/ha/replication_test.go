package ha

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// What the primary's commits wait for, from what dbsqlc.Replication reads.
func TestEvaluateReplication(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, c := range []struct {
		name, commit, names string
		inRecovery          bool
		states              []string
		want                *bool
		note                string
	}{
		{"no standby", "on", "", false, nil, &no, "no standby"},
		{"async standbys", "on", "", false, []string{"async", "async"}, &no, "2 asynchronous standby(s)"},
		{"sync standby", "on", "s1", false, []string{"sync", "async"}, &yes, "commits wait for 1 synchronous standby(s)"},
		{"quorum", "remote_apply", "ANY 1 (s1, s2)", false, []string{"quorum", "quorum"}, &yes, "commits wait for 2"},
		{"remote_write", "remote_write", "s1", false, []string{"sync"}, &yes, "synchronous_commit = remote_write"},
		{"local voids it", "local", "s1", false, []string{"sync"}, &no, "synchronous_commit = local"},
		{"off voids it", "off", "s1", false, []string{"sync"}, &no, "synchronous_commit = off"},
		{"named but not connected", "on", "s1", false, []string{"potential"}, &no, "no synchronous standby is connected"},
		{"named, none at all", "on", "s1", false, nil, &no, "no synchronous standby is connected"},
		{"unreadable", "on", "s1", false, []string{"", ""}, nil, "grant pg_monitor"},
		{"unreadable but not named", "on", "", false, []string{""}, &no, "asynchronous standby"},
		{"standby", "on", "", true, nil, nil, "the database is a standby"},
	} {
		r := EvaluateReplication(c.commit, c.names, c.inRecovery, c.states)
		require.Equal(t, c.want, r.Synchronous, c.name)
		require.Contains(t, r.Note, c.note, c.name)
		require.Equal(t, len(c.states), r.Standbys, c.name)
		problem := RequireSyncProblem(r, nil)
		require.Equal(t, c.want != nil && *c.want, problem == "", "%s: %s", c.name, problem)
	}
	r := EvaluateReplication("on", "s1", false, []string{"", "sync"})
	require.Equal(t, map[string]int{"unknown": 1, "sync": 1}, r.ByState)
	require.Contains(t, RequireSyncProblem(Replication{}, errors.New("down")), "cannot read the replication state")
}
