package pgtest

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The shared server is TEST_DATABASE_URL when set, else the project-local
// cluster, started once however many tests ask at once; a cluster that
// cannot start is an error naming both ways out, never a default server.
func TestServerSource(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

	t.Run("TEST_DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		s := &serverSource{getenv: env(map[string]string{"TEST_DATABASE_URL": "postgres://ci@db.example:5432/postgres"}),
			start: func() (string, error) {
				t.Error("the cluster was started although TEST_DATABASE_URL is set")
				return "", nil
			}}
		u, err := s.resolve()
		require.NoError(t, err)
		require.Equal(t, "postgres://ci@db.example:5432/postgres", u)
	})
	t.Run("project-local cluster, started once", func(t *testing.T) {
		t.Parallel()
		var starts atomic.Int32
		s := &serverSource{getenv: env(nil), start: func() (string, error) {
			starts.Add(1)
			return "postgres://postgres@127.0.0.1:54329/postgres?sslmode=disable", nil
		}}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				u, err := s.resolve()
				assert.NoError(t, err)
				assert.Equal(t, "postgres://postgres@127.0.0.1:54329/postgres?sslmode=disable", u)
			})
		}
		wg.Wait()
		require.EqualValues(t, 1, starts.Load())
	})
	t.Run("no cluster", func(t *testing.T) {
		t.Parallel()
		var starts atomic.Int32
		s := &serverSource{getenv: env(nil), start: func() (string, error) {
			starts.Add(1)
			return "", errors.New("devdb.sh start: exit status 1: devdb: PostgreSQL server programs (initdb, pg_ctl) not found")
		}}
		for range 2 {
			u, err := s.resolve()
			require.Empty(t, u)
			require.ErrorContains(t, err, "TEST_DATABASE_URL is not set")
			require.ErrorContains(t, err, "server programs (initdb, pg_ctl) not found")
			require.ErrorContains(t, err, "Set TEST_DATABASE_URL")
			require.ErrorContains(t, err, "install the PostgreSQL server programs")
			require.NotContains(t, err.Error(), "5432/")
		}
		require.EqualValues(t, 1, starts.Load(), "a failed start is not tried again by every test")
	})
}

// The cluster's script is found from this package (runtime.Caller), as
// ServerURL finds it.
func TestDevDBScriptFound(t *testing.T) {
	t.Parallel()
	p, err := devdbScript()
	require.NoError(t, err)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&0o111, "%s is executable", p)
}
