package pgtest

// The shared test server: TEST_DATABASE_URL, or the project-local cluster.
//
// Tests create and drop databases and roles on it, so it is never a server
// nobody named: without TEST_DATABASE_URL the project-local cluster of
// sidecar/scripts/devdb.sh (its own data folder under .pgdata, its own
// port) is started, once per test process, and left running as `make
// test` leaves it (`make db-stop` stops it). When that cannot be done (no
// PostgreSQL server programs), the test fails saying so; nothing falls
// back to a server that happens to listen on 127.0.0.1:5432.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// serverSource resolves the shared server once.
type serverSource struct {
	getenv func(string) string
	// start starts the project-local cluster and returns its URL.
	start func() (string, error)

	once sync.Once
	url  string
	err  error
}

var server = &serverSource{getenv: os.Getenv, start: startDevDB}

// ServerURL returns the URL of the shared test server's maintenance
// database: TEST_DATABASE_URL when set, else the project-local cluster,
// started the first time it is asked for. It fails t when there is
// neither. Under -short it skips t (short.Skip).
func ServerURL(t testing.TB) string {
	t.Helper()
	short.Skip(t, "PostgreSQL")
	u, err := server.resolve()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// resolve returns the server's URL, deciding (and starting the cluster)
// at the first call only.
func (s *serverSource) resolve() (string, error) {
	s.once.Do(func() {
		if u := s.getenv("TEST_DATABASE_URL"); u != "" {
			s.url = u
			return
		}
		u, err := s.start()
		if err != nil {
			s.err = fmt.Errorf("TEST_DATABASE_URL is not set, and the project-local PostgreSQL cluster (sidecar/scripts/devdb.sh) "+
				"could not be started: %w. Set TEST_DATABASE_URL to a server the tests may create and drop databases and roles on "+
				"(postgres://USER@HOST:PORT/postgres?sslmode=disable), or install the PostgreSQL server programs "+
				"(Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@16)", err)
			return
		}
		s.url = u
	})
	return s.url, s.err
}

// startDevDB runs devdb.sh start, then devdb.sh url. Test processes of
// several packages run at once: devdb.sh serialises its starts with
// flock(1) where it is installed, and a lock of this process's own
// (lockFile) does it where it is not (macOS).
func startDevDB() (string, error) {
	script, err := devdbScript()
	if err != nil {
		return "", err
	}
	state := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(script))), ".pgdata")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(state, "pgtest.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	var stderr bytes.Buffer
	start := exec.Command(script, "start")
	start.Stderr = &stderr
	if err := start.Run(); err != nil {
		return "", fmt.Errorf("devdb.sh start: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	stderr.Reset()
	url := exec.Command(script, "url")
	url.Stderr = &stderr
	out, err := url.Output()
	if err != nil {
		return "", fmt.Errorf("devdb.sh url: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// devdbScript returns the path of sidecar/scripts/devdb.sh: next to this
// source file's package when the build kept its path, else under the
// module root `go env GOMOD` names (go test runs in the package's folder).
func devdbScript() (string, error) {
	const rel = "sidecar/scripts/devdb.sh"
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		p := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "devdb.sh")
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p), nil
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("cannot find %s: go env GOMOD: %w", rel, err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("cannot find " + rel + ": not inside the module")
	}
	p := filepath.Join(filepath.Dir(gomod), rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("cannot find %s: %w", rel, err)
	}
	return p, nil
}
