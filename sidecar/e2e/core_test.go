package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// driveCoreCounter posts keys×copies deliveries at once to the core-nodes
// workflow (no deduplication) and checks that every delivery produced exactly
// one effect: the harness itself must neither lose nor add effects.
func driveCoreCounter(t *testing.T, n *N8N, counter *Counter, keys, copies int) {
	t.Helper()
	began := time.Now()
	defer func() { t.Logf("%d deliveries answered in %s", keys*copies, time.Since(began).Round(time.Millisecond)) }()
	Parallel(keys*copies, func(i int) {
		key := fmt.Sprintf("k%02d", i%keys)
		status, body := n.PostWebhook(t, "core-effect", map[string]string{"key": key}, nil)
		if status != http.StatusOK {
			t.Errorf("delivery %d (%s): status %d, body %.200s", i, key, status, body)
			return
		}
		var got struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(body, &got); err != nil || got.Key != key || got.Count < 1 {
			t.Errorf("delivery %d (%s): unexpected response %.200s (%v)", i, key, body, err)
		}
	})
	if got, want := counter.Total(), keys*copies; got != want {
		t.Errorf("effects: got %d, want %d (one per delivery)", got, want)
	}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("k%02d", k)
		if got := counter.Count(key); got != copies {
			t.Errorf("effects for %s: got %d, want %d", key, got, copies)
		}
	}
	// Every delivery is also a successful execution (probe calls add more).
	st := n.WaitExecutionsSettled(t, n.WorkflowIDs[0], time.Minute)
	if st["success"] < keys*copies || st["error"]+st["crashed"]+st["canceled"] != 0 {
		t.Errorf("n8n executions by status: %v, want at least %d success and no failures", st, keys*copies)
	}
}

// TestHarnessRegularMode proves the harness with n8n in regular mode and a
// workflow of core nodes only: N webhook calls give exactly N effects.
func TestHarnessRegularMode(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	wf := WriteWorkflow(t, "testdata/core-counter.json", map[string]string{"COUNTER_URL": counter.URL})
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}})
	driveCoreCounter(t, n, counter, 10, 3)

	// A crashed main process comes back on the same port and database with
	// its webhooks registered again.
	n.RestartMain(t, true)
	if status, body := n.PostWebhook(t, "core-effect", map[string]string{"key": "after-restart"}, nil); status != http.StatusOK {
		t.Fatalf("delivery after restart: status %d, body %.200s", status, body)
	}
	if got := counter.Count("after-restart"); got != 1 {
		t.Errorf("effects after restart: got %d, want 1", got)
	}
}

// TestHarnessQueueMode proves the harness with n8n in queue mode (main plus
// two workers on Redis, and one webhook process serving the production
// webhooks): N webhook calls to the webhook process give exactly N effects,
// with the Respond to Webhook answer relayed from the worker, and the main
// process no longer serves production webhooks.
func TestHarnessQueueMode(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	wf := WriteWorkflow(t, "testdata/core-counter.json", map[string]string{"COUNTER_URL": counter.URL})
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}, Queue: true, Workers: 2, WorkerConcurrency: 5, WebhookProcesses: 1})
	if len(n.WebhookBaseURLs) != 1 || n.WebhookBaseURLs[0] == n.URL {
		t.Fatalf("webhook URLs %v, want one webhook process other than main (%s)", n.WebhookBaseURLs, n.URL)
	}
	driveCoreCounter(t, n, counter, 10, 3)
	resp, err := http.Post(n.URL+"/webhook/core-effect", "application/json", strings.NewReader(`{"key":"main"}`))
	if err != nil {
		t.Fatalf("POST to the main process: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || counter.Count("main") != 0 {
		t.Errorf("production webhook on the main process: %s (effects %d), want 404 and none (N8N_DISABLE_PRODUCTION_MAIN_PROCESS)",
			resp.Status, counter.Count("main"))
	}
}

// TestHarnessClaimd proves the sidecar part of the harness: two replicas on
// one database answer /readyz, and a claim won through one replica is not
// won again through the other.
func TestHarnessClaimd(t *testing.T) {
	t.Parallel()
	c := StartClaimd(t, ClaimdConfig{Replicas: 2})
	claim := map[string]any{"source": "e2e/harness", "event_id": "evt-" + RandomHex(t, 4)}
	var outcomes []string
	for i := range c.URLs {
		status, body := c.Do(t, i, http.MethodPost, "/v1/claims", claim)
		if status != http.StatusOK {
			t.Fatalf("replica %d: POST /v1/claims: status %d, body %.300s", i, status, body)
		}
		var res struct {
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatalf("replica %d: response %.300s: %v", i, body, err)
		}
		outcomes = append(outcomes, res.Outcome)
	}
	if outcomes[0] != "won" || outcomes[1] == "won" {
		t.Errorf("outcomes through replicas 0 and 1: %v, want won then not won", outcomes)
	}
}

// nodePackageDir is the community node package, built into dist/ by
// `npm run build` in n8n-node/.
const nodePackageDir = "../../n8n-node"

// TestHarnessNodePackageLoads checks that the built community node package,
// laid out as a community-node install, is loaded by n8n under the type name
// the workflows use.
func TestHarnessNodePackageLoads(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	wf := WriteWorkflow(t, "testdata/core-counter.json", map[string]string{"COUNTER_URL": counter.URL})
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}, NodePackage: nodePackageDir})
	want := NodePackageName + ".idempotentClaim"
	types := n.NodeTypes(t)
	if !slices.Contains(types, want) {
		t.Errorf("node type %s not loaded (%d node types listed)", want, len(types))
	}
}
