package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// examplesDir holds the example workflows users import (n8n-node/examples);
// the tests run exactly those files, with their placeholders filled in.
const examplesDir = "../../n8n-node/examples"

// Example workflow files and the webhook paths they register.
const (
	inlineExample         = "inline-claim.json"
	durableExample        = "durable-dispatch.json"
	baselineExample       = "remove-duplicates-baseline.json"
	reconciliationExample = "reconciliation.json"

	inlinePath         = "idempotent-claim-inline"
	durablePath        = "idempotent-claim-dispatch"
	baselinePath       = "remove-duplicates-baseline"
	reconciliationPath = "idempotent-claim-reconcile"

	// inlineSource is the Source the inline example claims under.
	inlineSource = "orders"
)

// answerDeadline bounds one webhook call: a delivery answered 409 waits for
// nothing, but under load on two cores an execution can take seconds.
const answerDeadline = 2 * time.Minute

// exampleVars are the placeholder values of an example workflow (see
// WriteWorkflow): EFFECT_URL, CREDENTIAL_ID, HOOK_CREDENTIAL_ID,
// OPERATOR_CREDENTIAL_ID.
type exampleVars map[string]string

// WriteExample writes example workflow file with its placeholders replaced
// by vars. A non-empty tag makes a separate copy that can be imported next to
// the original: the workflow id ends in tag, the name carries it, and every
// webhook path (Webhook and Idempotent Claim Trigger nodes) gets the suffix
// "-"+tag (with a fresh webhookId). It returns the written file's path.
func WriteExample(t testing.TB, file string, vars exampleVars, tag string) string {
	t.Helper()
	path := WriteWorkflow(t, filepath.Join(examplesDir, file), vars)
	if tag == "" {
		return path
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var wf map[string]any
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("example %s: %v", file, err)
	}
	id, _ := wf["id"].(string)
	if len(tag) >= len(id) {
		t.Fatalf("example %s: tag %q is longer than the workflow id %q", file, tag, id)
	}
	wf["id"] = id[:len(id)-len(tag)] + tag
	wf["name"] = fmt.Sprintf("%v (%s)", wf["name"], tag)
	nodes, _ := wf["nodes"].([]any)
	for _, nd := range nodes {
		node, _ := nd.(map[string]any)
		if node["type"] != "n8n-nodes-base.webhook" && node["type"] != triggerNodeType {
			continue
		}
		params, _ := node["parameters"].(map[string]any)
		params["path"] = fmt.Sprintf("%v-%s", params["path"], tag)
		node["webhookId"] = uuidLike(t)
		if opts, ok := params["options"].(map[string]any); ok {
			if rd, ok := opts["responseData"].(string); ok {
				opts["responseData"] = rd + "-" + tag
			}
		}
	}
	return WriteJSON(t, strings.TrimSuffix(file, ".json")+"-"+tag+".json", wf)
}

// uuidLike returns a random RFC 4122 version-4 UUID string.
func uuidLike(t testing.TB) string {
	h := RandomHex(t, 16)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// credential is one entry of an n8n import:credentials file.
type credential struct {
	ID   string         `json:"id"`
	Name string         `json:"name"`
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// claimCredential is an "Idempotent Claim API" credential for the sidecar at
// baseURL.
func claimCredential(id, name, baseURL, apiKey string) credential {
	return credential{ID: id, Name: name, Type: "idempotentClaimApi",
		Data: map[string]any{"baseUrl": baseURL, "apiKey": apiKey}}
}

// event is one provider event as the tests deliver it: the body a provider
// would POST, with its own event id.
type event struct {
	ID     string
	Amount int
}

// newEvent returns an event with a fresh random id (prefix names the test).
func newEvent(t testing.TB, prefix string) event {
	return event{ID: prefix + "_" + RandomHex(t, 6), Amount: 4200}
}

func (e event) body() map[string]any {
	return map[string]any{"id": e.ID, "type": "order.created", "amount": e.Amount}
}

// claimKey is the idempotency key the inline example forwards to the effect
// for ev (tenant of c, source inlineSource): the key the Counter counts.
func claimKey(c *Claimd, ev event) string {
	return claim.IdempotencyKey(c.Tenant, claim.Key{Source: inlineSource, EventID: ev.ID})
}

// answer is a webhook caller's view of one delivery.
type answer struct {
	// Code is the HTTP status; 0 after a transport error.
	Code int
	// Status is the "status" field of the JSON answer ("done", "duplicate",
	// "conflict", "in_progress", "retry_later", "failed"), or "" when the
	// answer is not such JSON.
	Status string
	// ResultRef is the answer's "result_ref", when present.
	ResultRef string
	// RetryAfter is the Retry-After header, "" when absent.
	RetryAfter string
	// Raw is the answer body.
	Raw []byte
}

// String describes the answer for tallies and failure messages.
func (a answer) String() string {
	if a.Status != "" {
		return fmt.Sprintf("%d %s", a.Code, a.Status)
	}
	return fmt.Sprintf("%d %.80q", a.Code, a.Raw)
}

var webhookClient = &http.Client{Timeout: answerDeadline}

// deliver POSTs body as JSON to the production webhook path of n with extra
// headers and returns the answer. A transport error is reported with
// t.Errorf (safe from several goroutines) and gives Code 0.
func deliver(t testing.TB, n *N8N, path string, body any, headers map[string]string) answer {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Errorf("encoding delivery: %v", err)
		return answer{}
	}
	return post(t, n.WebhookURL(path), raw, headers)
}

// post sends one POST with a JSON body and reads the answer.
func post(t testing.TB, endpoint string, raw []byte, headers map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(raw))
	if err != nil {
		t.Errorf("request: %v", err)
		return answer{}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := webhookClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", endpoint, err)
		return answer{}
	}
	defer resp.Body.Close()
	a := answer{Code: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	if a.Raw, err = io.ReadAll(resp.Body); err != nil {
		t.Errorf("POST %s: reading answer: %v", endpoint, err)
	}
	var parsed struct {
		Status    string  `json:"status"`
		ResultRef *string `json:"result_ref"`
	}
	if json.Unmarshal(a.Raw, &parsed) == nil {
		a.Status = parsed.Status
		if parsed.ResultRef != nil {
			a.ResultRef = *parsed.ResultRef
		}
	}
	return a
}

// target is where a storm's deliveries go: one n8n and one or more webhook
// paths, used in turn (delivery i goes to paths[i % len(paths)]), so that
// copies of a workflow bound to different sidecar replicas share the load.
type target struct {
	n     *N8N
	paths []string
}

func (tg target) deliver(t testing.TB, i int, ev event) answer {
	t.Helper()
	return deliver(t, tg.n, tg.paths[i%len(tg.paths)], ev.body(), nil)
}

// sequentialStorm delivers ev copies times, each after the previous answer.
func sequentialStorm(t testing.TB, tg target, ev event, copies int) []answer {
	t.Helper()
	out := make([]answer, copies)
	for i := range out {
		out[i] = tg.deliver(t, i, ev)
	}
	return out
}

// parallelStorm delivers copies copies of every event all at once
// (len(events)·copies concurrent requests, copies of one event spread over
// the target's paths) and returns the answers per event id.
func parallelStorm(t testing.TB, tg target, events []event, copies int) map[string][]answer {
	t.Helper()
	all := make([]answer, len(events)*copies)
	Parallel(len(all), func(i int) {
		all[i] = tg.deliver(t, i/len(events), events[i%len(events)])
	})
	out := map[string][]answer{}
	for i, a := range all {
		id := events[i%len(events)].ID
		out[id] = append(out[id], a)
	}
	return out
}

// tally counts answers by their description ("200 duplicate", "409 in_progress").
func tally(answers []answer) map[string]int {
	m := map[string]int{}
	for _, a := range answers {
		m[a.String()]++
	}
	return m
}

// checkClaimAnswers checks the answers of the deliveries of one event to a
// claim example workflow when the effect does not fail: exactly one "200
// done"; every other answer "200 duplicate" carrying the done answer's
// result_ref, or "409 in_progress" with a Retry-After header (the winner
// still held the claim).
func checkClaimAnswers(t testing.TB, what string, answers []answer) {
	t.Helper()
	done := 0
	ref := ""
	for _, a := range answers {
		if a.Code == http.StatusOK && a.Status == "done" {
			done++
			ref = a.ResultRef
		}
	}
	if done != 1 {
		t.Errorf("%s: %d deliveries answered 200 done, want exactly 1 (answers: %v)", what, done, tally(answers))
	}
	for _, a := range answers {
		switch {
		case a.Code == http.StatusOK && a.Status == "done":
		case a.Code == http.StatusOK && a.Status == "duplicate":
			if ref != "" && a.ResultRef != ref {
				t.Errorf("%s: duplicate answered result_ref %q, want the effect's %q", what, a.ResultRef, ref)
			}
		case a.Code == http.StatusConflict && a.Status == "in_progress":
			if n, err := strconv.Atoi(a.RetryAfter); err != nil || n < 0 {
				t.Errorf("%s: 409 in_progress with Retry-After %q, want whole seconds", what, a.RetryAfter)
			}
		default:
			t.Errorf("%s: unexpected answer %s", what, a)
		}
	}
}

// checkEffects checks that the counter performed exactly want effects for
// each of keys.
func checkEffects(t testing.TB, counter *Counter, what string, want int, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if got := counter.Count(k); got != want {
			t.Errorf("%s: %d effects for key %s, want %d (attempts %d)", what, got, k, want, counter.Attempts(k))
		}
	}
}

// claimRecord is the part of a sidecar claim record the tests read.
type claimRecord struct {
	ClaimID   string `json:"claim_id"`
	State     string `json:"state"`
	Attempt   int    `json:"attempt"`
	ResultRef string `json:"result_ref"`
	// ConflictCount counts deliveries of the key with a different payload.
	ConflictCount int `json:"conflict_count"`
	// LastError is the last failure's message.
	LastError string `json:"last_error"`
}

// lookupClaim reads the claim record of (source, eventID) through replica 0.
func lookupClaim(t testing.TB, c *Claimd, source, eventID string) claimRecord {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/v1/claims?source="+url.QueryEscape(source)+"&event_id="+url.QueryEscape(eventID), nil)
	if status != http.StatusOK {
		t.Fatalf("GET claim %s/%s: status %d, body %.300s", source, eventID, status, body)
	}
	var rec claimRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatalf("GET claim %s/%s: %v (%.300s)", source, eventID, err, body)
	}
	return rec
}

// claimsServed sums claimd_claims_total (claims decided, all outcomes) in
// the /metrics of replica i.
func claimsServed(t testing.TB, c *Claimd, i int) int {
	t.Helper()
	status, body := c.Do(t, i, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("replica %d: GET /metrics: status %d", i, status)
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "claimd_claims_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("replica %d: metrics line %q: %v", i, line, err)
		}
		total += v
	}
	return int(total)
}

// checkNoFailedExecutions waits until n8n has stored every execution of the
// workflow and checks that none ended in error: the examples answer every
// outcome, a failed effect included, from a Respond to Webhook node.
func checkNoFailedExecutions(t testing.TB, n *N8N, workflowID string) {
	t.Helper()
	st := n.WaitExecutionsSettled(t, workflowID, 2*time.Minute)
	if st["error"]+st["crashed"]+st["canceled"] != 0 {
		t.Errorf("workflow %s: executions by status %v, want none failed", workflowID, st)
	}
}
