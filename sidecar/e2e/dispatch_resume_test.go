package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDispatchToResumeURL runs the durable dispatcher against a real n8n
// Wait node's resume URL ($execution.resumeUrl): the first event resumes
// the execution (2xx, dispatched); the second, posted to the same URL
// once the execution no longer waits, gets n8n's own 409, which claimd
// records as delivered (forward.delivered_statuses defaults to [409] for
// a …/webhook-waiting/… URL) instead of retrying it into a dead letter.
func TestDispatchToResumeURL(t *testing.T) {
	t.Parallel()
	wf := WriteWorkflow(t, filepath.Join("testdata", "dispatch-resume.json"), nil)
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}, NodePackage: nodePackageDir})

	a := post(t, n.WebhookURL("resume-start"), []byte(`{}`), nil)
	resumeURL := strings.TrimSpace(string(a.Raw))
	if a.Code != http.StatusOK || !strings.Contains(resumeURL, "/webhook-waiting/") {
		t.Fatalf("starting the waiting execution: %s, want 200 with its resume URL", a)
	}

	const token = "e2e-resume-token-000000000001"
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sources, []byte(fmt.Sprintf(`
sources:
  resume:
    tenant: e2e
    provider: token
    secrets: ["%s"]
    options: {key: {id_header: X-Id}}
    forward: {url: "%s", require_claim: false, max_attempts: 3, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`, token, resumeURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := StartClaimd(t, ClaimdConfig{Env: map[string]string{"CLAIMD_SOURCES_FILE": sources}})

	type dispatchState struct {
		State    string `json:"dispatch_state"`
		Attempts int    `json:"dispatch_attempts"`
		Status   int    `json:"last_dispatch_status"`
	}
	dispatch := func(id string) dispatchState {
		t.Helper()
		a := post(t, c.URL()+"/ingest/resume", []byte(`{"decision":"approved"}`),
			map[string]string{"Authorization": "Bearer " + token, "X-Id": id})
		var rc ingestReceipt
		if a.Code != http.StatusOK || json.Unmarshal(a.Raw, &rc) != nil || len(rc.Received) != 1 {
			t.Fatalf("ingest %s: %s", id, a)
		}
		claimID := rc.Received[0].ClaimID
		deadline := time.Now().Add(time.Minute)
		for {
			status, raw := c.Do(t, 0, http.MethodGet, "/v1/inbox/"+claimID, nil)
			var in dispatchState
			if status != http.StatusOK || json.Unmarshal(raw, &in) != nil {
				t.Fatalf("GET /v1/inbox/%s: %d %.300s", claimID, status, raw)
			}
			if in.State != "pending" {
				t.Logf("%s: %+v", id, in)
				return in
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still pending after a minute: %+v", id, in)
			}
			time.Sleep(pollInterval)
		}
	}

	if in := dispatch("resume-1"); in != (dispatchState{"dispatched", 1, http.StatusOK}) {
		t.Errorf("first event: %+v, want dispatched by n8n's 200 at the first attempt", in)
	}
	if in := dispatch("resume-2"); in != (dispatchState{"dispatched", 1, http.StatusConflict}) {
		t.Errorf("second event: %+v, want dispatched by n8n's 409 at the first attempt, not retried", in)
	}

	// The delivery log names the 409 and what n8n's body said of the
	// execution: n8n's answer is the one the dispatcher recognises.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var detail string
	if err := conn.QueryRow(ctx, `SELECT d.detail FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id
		WHERE c.event_id = 'resume-2' AND d.outcome = 'dispatched'`).Scan(&detail); err != nil {
		t.Fatal(err)
	}
	t.Logf("resume-2's delivery log: %s", detail)
	const want = "HTTP 409 from an n8n resume URL: the execution was resumed already (n8n: "
	if !strings.HasPrefix(detail, want) {
		t.Errorf("delivery-log detail %q, want it to start with %q", detail, want)
	}
}
