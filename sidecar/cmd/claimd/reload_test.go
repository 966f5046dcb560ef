package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The sources file is reloaded without a restart: a source added to the
// file serves at once after SIGHUP, and a broken file keeps the running
// configuration.
func TestSourcesFileReloadsOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sources.yaml")
	write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
	write(`sources:
  first:
    tenant: t1
    provider: github
    secrets: ["first-secret-0123456789"]
    forward: {url: "http://127.0.0.1:9/hook"}
`)
	p := startServe(t, map[string]string{
		"DATABASE_URL": pgtest.NewDatabase(t), "CLAIMD_API_KEYS": "t1:t1-reload-key-0123456789",
		"CLAIMD_SOURCES_FILE": path, "CLAIMD_RELOAD_INTERVAL_SECONDS": "0", "CLAIMD_DISPATCH": "false",
	})
	post := func(source string) int {
		resp, err := http.Post(p.url+"/ingest/"+source, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	// An unknown source is answered as an unauthenticated delivery, so a
	// signed one tells whether "second" is configured.
	signed := func() int {
		body := []byte(`{"id":"evt_reload_1","type":"invoice.paid"}`)
		req, err := http.NewRequest(http.MethodPost, p.url+"/ingest/second", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", verifytest.StripeHeader(time.Now().Unix(), body, "whsec_second-0123456789"))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, post("first"), "configured source, unsigned delivery")
	require.Equal(t, http.StatusUnauthorized, signed(), "not configured yet")

	write(`sources:
  first:
    tenant: t1
    provider: github
    secrets: ["first-secret-0123456789"]
    forward: {url: "http://127.0.0.1:9/hook"}
  second:
    tenant: t1
    provider: stripe
    secrets: ["whsec_second-0123456789"]
    forward: {url: "http://127.0.0.1:9/hook"}
`)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.stderr.waitMessage(t, "sources file reloaded", p.done)
	require.Equal(t, http.StatusOK, signed(), "the new source serves without a restart")

	write("sources:\n  broken:\n    provider: nope\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.stderr.waitMessage(t, "sources file not reloaded; keeping the running configuration", p.done)
	require.Equal(t, http.StatusOK, signed(), "the running configuration is kept")
	require.NotContains(t, p.stderr.String(), "whsec_second", "secrets never reach the log")
}

// Without a sources file SIGHUP is acknowledged in the log and claimd
// keeps serving.
func TestSIGHUPWithoutSourcesFile(t *testing.T) {
	t.Parallel()
	p := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CLAIMD_API_KEYS": "t1:t1-hup-key-0123456789"})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.stderr.waitMessage(t, "SIGHUP: no sources file to reload (CLAIMD_SOURCES_FILE is not set)", p.done)
	resp, err := http.Get(p.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
