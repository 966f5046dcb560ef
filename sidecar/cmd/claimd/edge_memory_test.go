package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Memory held before authentication, measured on the real binary (built
// without the race detector): 100 connections without an API key, each
// sending 4,193,999 bytes of a declared 4,194,000 to /v1 and holding, then
// 100 more doing the same to an ingest source whose limit takes 4 MiB
// bodies. The /v1 ones are refused from their headers; the ingest ones
// hold what arrived, all from one address, so together at most the
// address's share of the 32 MiB ingest budget (25%: 8 MiB), and the rest
// wait or are cut. Meanwhile a legitimate claim is answered, and claimd's peak
// resident memory rises by less than 64 MiB. Memory is measured, not
// timed: the test waits on claimd's own body gauges.
func TestMemoryBeforeAuthenticationIsBounded(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	const key = "t1-memory-key-0123456789abcdef"
	dir := t.TempDir()
	sources := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(`
sources:
  big:
    tenant: t1
    provider: github
    secrets: ["memory-test-secret-000"]
    max_body_bytes: 4194304
    forward: {url: "http://127.0.0.1:9/hook"}
`), 0o600))
	p := startServeBinary(t, claimdBinaryPlain(t), map[string]string{
		"DATABASE_URL":        db,
		"CLAIMD_API_KEYS":     "t1:" + key,
		"CLAIMD_SOURCES_FILE": sources,
		"CLAIMD_DISPATCH":     "false",
	})
	c := newAPI(t, p.url, key)
	addr := strings.TrimPrefix(p.url, "http://")
	c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"mem","event_id":"warm-up"}`)
	base := procStatusKB(t, p.cmd.Process.Pid, "VmRSS")

	const declared = 4194000
	pad := bytes.Repeat([]byte("a"), declared-1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	attack := func(path string) {
		for range 100 {
			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nX-GitHub-Delivery: d\r\nX-GitHub-Event: push\r\nContent-Length: %d\r\n\r\n", path, declared)
				if _, err := io.WriteString(conn, head); err != nil {
					return
				}
				_, _ = conn.Write(pad) // fails once claimd closes a refused connection
			}()
		}
	}

	attack("/v1/claims")
	attack("/ingest/big")
	// The address's share is full: the next 16 KiB read of any of its
	// bodies would pass it.
	const share = 8 << 20
	waitFor(t, "the address's share of the ingest budget to be held", func() bool {
		return scrape(t, p.url)[`claimd_http_body_bytes{class="ingest",kind="received"}`] > share-16<<10
	})
	// A legitimate claim is answered meanwhile.
	won := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"mem","event_id":"during-attack"}`)
	require.Equal(t, "won", won["outcome"])

	rss := procStatusKB(t, p.cmd.Process.Pid, "VmRSS")
	peak := procStatusKB(t, p.cmd.Process.Pid, "VmHWM")
	t.Logf("claimd resident memory: %d KiB before, %d KiB with the 200 connections held, peak %d KiB", base, rss, peak)
	require.Less(t, (peak-base)*1024, int64(64<<20), "peak RSS rose by %d KiB", peak-base)
}

// procStatusKB reads one "kB" field of /proc/PID/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// scrape reads /metrics into series → value (samples without labels keyed
// by name).
func scrape(t *testing.T, base string) map[string]int64 {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		f, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = int64(f)
		}
	}
	return out
}
