package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Across claims, completes, fails, conflicts, rejected keys and tokens,
// malformed bodies and database outages, the process's log (stderr, at
// debug level) never holds a raw payload, a claim token or an API key.
func TestLogNeverHoldsPayloadsTokensOrKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	secret := func(what string) string {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return what + "-" + hex.EncodeToString(b)
	}
	var forbidden []string
	keep := func(s string) string {
		require.NotEmpty(t, s)
		forbidden = append(forbidden, s)
		return s
	}

	staticKey := keep(secret("static-api-key"))
	stdout, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": db}, "keys", "create", "t2")
	require.Equal(t, 0, code, stderr)
	dbKey := keep(keyLine.FindStringSubmatch(stdout)[1])

	p := startServe(t, map[string]string{
		"DATABASE_URL":     db,
		"CLAIMD_API_KEYS":  "t1:" + staticKey,
		"CLAIMD_LOG_LEVEL": "debug",
	})
	c := newAPI(t, p.url, staticKey)
	c2 := newAPI(t, p.url, dbKey)
	token := func(m map[string]any) string {
		require.Equal(t, "won", m["outcome"], "%v", m)
		return keep(str(m, "claim_token"))
	}
	payload := func() string {
		return fmt.Sprintf(`{"customer":{"email":%q,"card":%q},"amount":4200}`,
			keep(secret("payload-email")), keep(secret("payload-card")))
	}

	// Claim, redeliver, conflict, complete, duplicate.
	p1 := payload()
	won := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"logs","event_id":"e1","payload":`+p1+`}`)
	tok1 := token(won)
	require.Equal(t, "in_progress", c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"logs","event_id":"e1","payload":`+p1+`}`)["outcome"])
	require.Equal(t, "conflict", c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"logs","event_id":"e1","payload":`+payload()+`}`)["outcome"])
	c.must(http.StatusConflict, "POST", "/v1/claims/"+str(won, "claim_id")+"/complete", `{"claim_token":"`+keep(uuid.NewString())+`"}`)
	c.must(http.StatusOK, "POST", "/v1/claims/"+str(won, "claim_id")+"/extend", `{"claim_token":"`+tok1+`","lease_seconds":60}`)
	c.must(http.StatusOK, "POST", "/v1/claims/"+str(won, "claim_id")+"/complete", `{"claim_token":"`+tok1+`","result_ref":"inv-1"}`)
	require.Equal(t, "duplicate", c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"logs","event_id":"e1","payload":`+p1+`}`)["outcome"])

	// Hashed key fields, an action claim, fails of every kind.
	kf := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"logs","key_fields":{"email":"`+keep(secret("keyfield-email"))+`"},"payload":`+payload()+`}`)
	c.must(http.StatusOK, "POST", "/v1/claims/"+str(kf, "claim_id")+"/fail",
		`{"claim_token":"`+token(kf)+`","error":"`+keep(secret("upstream-error"))+`","retry":"retryable"}`)
	for i, kind := range []string{"permanent", "unknown"} {
		w := c.must(http.StatusOK, "POST", "/v1/claims", fmt.Sprintf(`{"source":"logs","event_id":"f%d","action":"send-email","payload":%s}`, i, payload()))
		c.must(http.StatusOK, "POST", "/v1/claims/"+str(w, "claim_id")+"/fail",
			`{"claim_token":"`+token(w)+`","error":"`+keep(secret("upstream-error"))+`","retry":"`+kind+`"}`)
	}

	// A batch with a bad item; the database key's tenant.
	batch := c2.must(http.StatusOK, "POST", "/v1/claims/batch", `{"claims":[
		{"source":"logs","event_id":"b1","payload":`+payload()+`},
		{"source":"logs","payload":`+payload()+`},
		{"source":"logs","event_id":"b2","payload_hash":"`+zeroHash+`"}]}`)
	results := batch["results"].([]any)
	token(results[0].(map[string]any))
	require.Equal(t, "invalid", results[1].(map[string]any)["error"].(map[string]any)["code"])
	token(results[2].(map[string]any))
	c2.must(http.StatusOK, "GET", "/v1/claims?source=logs&event_id=b1", "")

	// Rejected credentials and malformed or invalid bodies.
	newAPI(t, p.url, keep(secret("wrong-api-key"))).must(http.StatusUnauthorized, "POST", "/v1/claims", `{"source":"logs","event_id":"x"}`)
	newAPI(t, p.url, keep("ick_"+secret("wrong-db-key"))).must(http.StatusUnauthorized, "GET", "/v1/whoami", "")
	c.must(http.StatusBadRequest, "POST", "/v1/claims", `{"source":"logs","event_id":"m1","payload":{"card":"`+keep(secret("malformed"))+`"`)
	c.must(http.StatusUnprocessableEntity, "POST", "/v1/claims", `{"source":"logs","event_id":"m2","payload":`+payload()+`,"payload_hash":"`+zeroHash+`"}`)
	c.must(http.StatusNotFound, "POST", "/v1/claims/"+uuid.NewString()+"/complete", `{"claim_token":"`+keep(uuid.NewString())+`"}`)

	// A database outage: requests meeting dead connections log their
	// error (503) while carrying payloads.
	admin, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'claimd'`)
	require.NoError(t, err)
	unavailable := 0
	for i := 0; ; i++ {
		status, m, err := c.do("POST", "/v1/claims", fmt.Sprintf(`{"source":"logs","event_id":"o%d","payload":%s}`, i, payload()))
		require.NoError(t, err)
		if status == http.StatusOK {
			token(m)
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, status, "%v", m)
		unavailable++
		require.Less(t, unavailable, 100)
	}

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.exitCode(t))

	log := p.stderr.String()
	requests := 0
	for _, l := range p.stderr.Lines() {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "every log line is JSON: %q", l)
		if m["message"] == "request" {
			requests++
		}
	}
	require.GreaterOrEqual(t, requests, 20, "the log captured the requests")
	if unavailable > 0 {
		require.Contains(t, log, "dependency unavailable", "the outage was logged")
	}
	for _, s := range forbidden {
		require.False(t, strings.Contains(log, s), "log holds %q:\n%s", s, log)
	}
	t.Logf("%d log lines, %d request lines, %d answers 503 during the outage, %d secrets checked",
		len(p.stderr.Lines()), requests, unavailable, len(forbidden))
}
