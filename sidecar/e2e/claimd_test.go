package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// claimdPackage is the sidecar binary's import path.
const claimdPackage = "github.com/idempotent-claim/idempotent-claim/sidecar/cmd/claimd"

// claimdReadyTimeout bounds a sidecar replica's start (migrations included).
const claimdReadyTimeout = 2 * time.Minute

// binDir holds binaries built once per test binary; set by TestMain.
var binDir string

var claimdBuild struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ic-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: creating the binary dir:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ClaimdBinary builds the sidecar binary once per test binary (go build of
// sidecar/cmd/claimd) and returns its path. A build failure fails the test
// with the compiler output.
func ClaimdBinary(t testing.TB) string {
	t.Helper()
	short.Skip(t, "a build of claimd")
	claimdBuild.once.Do(func() {
		claimdBuild.path = filepath.Join(binDir, "claimd")
		cmd := exec.Command("go", "build", "-o", claimdBuild.path, claimdPackage)
		claimdBuild.out, claimdBuild.err = cmd.CombinedOutput()
	})
	if claimdBuild.err != nil {
		t.Fatalf("go build %s: %v\n%s", claimdPackage, claimdBuild.err, claimdBuild.out)
	}
	return claimdBuild.path
}

// ClaimdConfig describes a sidecar deployment for one test.
type ClaimdConfig struct {
	// Replicas is the number of sidecar processes sharing one database
	// (default 1).
	Replicas int
	// DatabaseURL is the sidecar's database; "" creates a fresh one.
	DatabaseURL string
	// Env adds or overrides environment variables of every replica; ""
	// removes a variable.
	Env map[string]string
}

// Claimd is a running sidecar deployment: Replicas processes on one
// database, all accepting APIKey for tenant Tenant. Stopped in t.Cleanup.
type Claimd struct {
	// URLs are the replicas' base URLs, http://127.0.0.1:PORT, in start order.
	URLs []string
	// Procs are the replica processes, in URLs order.
	Procs []*Proc
	// DatabaseURL is the sidecar's PostgreSQL database.
	DatabaseURL string
	// Tenant and APIKey are the one configured credential
	// (CLAIMD_API_KEYS=Tenant:APIKey).
	Tenant string
	APIKey string
}

// StartClaimd builds (once) and starts cfg.Replicas sidecar replicas on one
// database. Replicas start one after another, each polled on GET /readyz
// until it answers 200, so that only the first applies migrations.
func StartClaimd(t testing.TB, cfg ClaimdConfig) *Claimd {
	t.Helper()
	short.Skip(t, "claimd on PostgreSQL")
	bin := ClaimdBinary(t)
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	c := &Claimd{DatabaseURL: cfg.DatabaseURL, Tenant: "e2e", APIKey: "ick_" + RandomHex(t, 24)}
	if c.DatabaseURL == "" {
		c.DatabaseURL = FreshDatabase(t, "ic_e2e_claimd")
	}
	dir := LogDir(t, "claimd")
	for i := 0; i < cfg.Replicas; i++ {
		addr := "127.0.0.1:" + strconv.Itoa(FreePort(t))
		env := EnvWithout([]string{"CLAIMD_", "DATABASE_URL"}, map[string]string{
			"DATABASE_URL":    c.DatabaseURL,
			"CLAIMD_ADDR":     addr,
			"CLAIMD_API_KEYS": c.Tenant + ":" + c.APIKey,
		}, cfg.Env)
		name := fmt.Sprintf("claimd-%d", i)
		p := StartProc(t, name, dir, filepath.Join(dir, name+".log"), env, bin, "serve")
		url := "http://" + addr
		WaitHTTP(t, url+"/readyz", http.StatusOK, "", claimdReadyTimeout, p)
		c.URLs = append(c.URLs, url)
		c.Procs = append(c.Procs, p)
	}
	return c
}

// URL is the first replica's base URL.
func (c *Claimd) URL() string { return c.URLs[0] }

// Do sends an API request to replica i (method, path such as "/v1/claims",
// body JSON-encoded when not nil) with the deployment's bearer key, and
// returns the status and body. Transport errors fail the test.
func (c *Claimd) Do(t testing.TB, i int, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encoding request body: %v", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.URLs[i]+path, rd)
	if err != nil {
		t.Fatalf("sidecar request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, req.URL, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading response: %v", method, req.URL, err)
	}
	return resp.StatusCode, out
}
