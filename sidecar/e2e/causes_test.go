package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestDuplicateCauseN8nRanOneDispatchTwice: every duplicate is explained,
// in a real n8n: claimd dispatches one ingested event once to the durable
// example, whose execution claims and completes it; the very request claimd
// forwarded is then run by n8n a second time (posted again to n8n's
// webhook, as a resend inside n8n would). The second execution's claim is a
// duplicate, the effect ran once, and the delivery log names the cause
// n8n_twice with both execution ids. The settle hook tells claimd the
// workflow version each execution ran: both ran the one published version,
// so the cause stays n8n_twice and the note names that version for both
// (two versions active at once, n8n_two_versions, is covered by the httpapi
// tests: n8n does not run two versions of one workflow's webhook side by
// side on demand).
func TestDuplicateCauseN8nRanOneDispatchTwice(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	port := FreePort(t)
	hookToken := RandomHex(t, 24)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(RandomHex(t, 16)))
	n8nURL := fmt.Sprintf("http://127.0.0.1:%d/webhook/%s", port, durablePath)

	// tap stands between claimd's dispatcher and n8n: it forwards each
	// request to the durable example's webhook and keeps the last one.
	var mu sync.Mutex
	var kept struct {
		header http.Header
		body   []byte
	}
	tap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		kept.header, kept.body = r.Header.Clone(), body
		mu.Unlock()
		status, answer := forward(r.Header, body, n8nURL)
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(tap.Close)

	sources := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sources, []byte(fmt.Sprintf(`sources:
  causes:
    tenant: e2e
    provider: standard-webhooks
    secrets: [%q]
    forward: {url: %q, headers: {Authorization: %q}, timeout_seconds: 60, max_attempts: 20, backoff_base_seconds: 1, backoff_cap_seconds: 2}
`, secret, tap.URL, "Bearer "+hookToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := StartClaimd(t, ClaimdConfig{Env: map[string]string{"CLAIMD_SOURCES_FILE": sources}})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
		{ID: hookCredID, Name: "Sidecar dispatch token (e2e)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": "Authorization", "value": "Bearer " + hookToken}},
		{ID: operatorCredID, Name: "Reconciliation operator token (e2e)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": operatorHeader, "value": RandomHex(t, 24)}},
	})
	vars := exampleVars{"EFFECT_URL": counter.URL + "/effect", "CREDENTIAL_ID": claimCredID,
		"HOOK_CREDENTIAL_ID": hookCredID, "OPERATOR_CREDENTIAL_ID": operatorCredID}
	// The settle hook tells claimd which workflow version each execution
	// ran (n8n gives the Claim node none).
	StartN8N(t, N8NConfig{Workflows: []string{WriteExample(t, durableExample, vars, "")}, Credentials: []string{creds},
		NodePackage: nodePackageDir, Port: port, HookFiles: []string{settleHookFile},
		Env: map[string]string{"IDEMPOTENT_CLAIM_URL": c.URL(), "IDEMPOTENT_CLAIM_API_KEY": c.APIKey}})

	ev := newEvent(t, "twice")
	body, err := json.Marshal(ev.body())
	if err != nil {
		t.Fatal(err)
	}
	msgID := "msg_" + RandomHex(t, 8)
	ts := time.Now().Unix()
	sig, err := verifytest.StandardWebhooks(secret, msgID, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	a := post(t, c.URL()+"/ingest/causes", body,
		map[string]string{"webhook-id": msgID, "webhook-timestamp": strconv.FormatInt(ts, 10), "webhook-signature": sig})
	var rc ingestReceipt
	if a.Code != http.StatusOK || json.Unmarshal(a.Raw, &rc) != nil || len(rc.Received) != 1 {
		t.Fatalf("ingest: %s, want 200 with one received event", a)
	}
	claimID, eventID := rc.Received[0].ClaimID, rc.Received[0].EventID

	var in inboxEvent
	deadline := time.Now().Add(3 * time.Minute)
	for {
		status, raw := c.Do(t, 0, http.MethodGet, "/v1/inbox/"+claimID, nil)
		if status != http.StatusOK || json.Unmarshal(raw, &in) != nil {
			t.Fatalf("GET /v1/inbox/%s: status %d, body %.300s", claimID, status, raw)
		}
		if in.DispatchState != "pending" && in.ClaimState == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox event not dispatched and completed after 3 minutes: %+v", in)
		}
		time.Sleep(pollInterval)
	}
	if in.DispatchState != "dispatched" || in.DispatchAttempts != 1 {
		t.Fatalf("inbox event: %+v, want dispatched once", in)
	}

	// n8n runs the forwarded request a second time.
	mu.Lock()
	header, again := kept.header, kept.body
	mu.Unlock()
	if status, answer := forward(header, again, n8nURL); status != http.StatusOK {
		t.Fatalf("the forwarded request run again in n8n: %d %.300s, want 200", status, answer)
	}

	key := claim.IdempotencyKey(c.Tenant, claim.Key{Source: "causes", EventID: eventID})
	checkEffects(t, counter, "one event, dispatched once, run twice in n8n", 1, key)

	type entry struct {
		Outcome     string `json:"outcome"`
		ExecutionID string `json:"execution_id"`
		Cause       string `json:"cause"`
		CauseNote   string `json:"cause_note"`
		// WorkflowID: what the Claim node sends (n8n gives a node its
		// workflow's id, and no version id); WorkflowVersion: what the
		// settle hook told when the execution ended.
		WorkflowID      string `json:"workflow_id"`
		WorkflowVersion string `json:"workflow_version"`
	}
	var won, dup entry
	deadline = time.Now().Add(time.Minute)
	for dup.Outcome == "" || won.WorkflowVersion == "" || dup.WorkflowVersion == "" {
		status, raw := c.Do(t, 0, http.MethodGet, "/v1/claims/"+claimID, nil)
		var rec struct {
			Deliveries []entry `json:"deliveries"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &rec) != nil {
			t.Fatalf("GET /v1/claims/%s: status %d, body %.300s", claimID, status, raw)
		}
		for _, d := range rec.Deliveries {
			switch d.Outcome {
			case "won":
				won = d
			case "duplicate", "in_progress":
				dup = d
			}
		}
		if dup.Outcome == "" || won.WorkflowVersion == "" || dup.WorkflowVersion == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no duplicate with both executions' workflow versions in the delivery log after a minute: %+v", rec.Deliveries)
			}
			time.Sleep(pollInterval)
		}
	}
	if won.ExecutionID == "" || dup.ExecutionID == "" || won.ExecutionID == dup.ExecutionID {
		t.Fatalf("won by %q, copy from %q: want two executions", won.ExecutionID, dup.ExecutionID)
	}
	if dup.Cause != string(claim.CauseN8nTwice) {
		t.Errorf("the second execution's copy: cause %q (%s), want n8n_twice", dup.Cause, dup.CauseNote)
	}
	if want := "executions " + won.ExecutionID + " and " + dup.ExecutionID; !strings.Contains(dup.CauseNote, want) {
		t.Errorf("cause note %q does not name both executions (%s)", dup.CauseNote, want)
	}
	t.Logf("the copy: %s: %s", dup.Cause, dup.CauseNote)
	// Two executions of one published workflow run one version: n8n_twice,
	// the note naming the version both ran.
	if won.WorkflowID == "" || dup.WorkflowID != won.WorkflowID || won.WorkflowVersion != dup.WorkflowVersion {
		t.Errorf("workflow of the won entry %q/%q and of the copy %q/%q: want one workflow id and one version",
			won.WorkflowID, won.WorkflowVersion, dup.WorkflowID, dup.WorkflowVersion)
	}
	if want := fmt.Sprintf("execution %s ran workflow %s version %s, execution %s ran workflow %s version %s",
		won.ExecutionID, won.WorkflowID, won.WorkflowVersion, dup.ExecutionID, dup.WorkflowID, dup.WorkflowVersion); !strings.Contains(dup.CauseNote, want) {
		t.Errorf("cause note %q does not name the version each execution ran (%s)", dup.CauseNote, want)
	}
}

// forward posts body with header (less the hop-by-hop and length headers)
// to url and returns the answer.
func forward(header http.Header, body []byte, url string) (int, []byte) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	for k, vs := range header {
		switch http.CanonicalHeaderKey(k) {
		case "Host", "Content-Length", "Connection", "Accept-Encoding":
			continue
		}
		req.Header[k] = vs
	}
	resp, err := webhookClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, answer
}
