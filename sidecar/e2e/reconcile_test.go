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

// Automatic reconciliation in a real n8n in queue mode (main, one webhook
// process, two workers): a claim whose outcome became unknown is settled by
// claimd calling the reconcile example workflow, which searches the
// destination by the claim's idempotency key and answers through the node's
// Answer Reconcile operation.

// reconcileExample is the shipped reconcile workflow, and the webhook path
// claimd calls.
const (
	reconcileExample = "reconcile-by-key.json"
	reconcilePath    = "idempotent-claim-reconciler"
	// junkReconcilePath is testdata/reconcile-garbage.json's webhook: it
	// answers 200 with a verdict claimd does not take.
	junkReconcilePath = "ic-e2e-reconcile-junk"
)

// The claim-only sources of the test, one per reconciler, all under lease
// policy review; the pay workflows claim under the source the delivery's
// body names.
const (
	recSource     = "rec-orders" // reconciler crm: the reconcile example
	recSlowSource = "rec-slow"   // reconciler slow: the example, called with a 2 s timeout
	recJunkSource = "rec-junk"   // reconciler junk: answers no valid verdict
	// recBriefSource's reconciler brief is the example with a short call
	// deadline (timeout 5 s + answer 1 s): an answer held past it is late.
	recBriefSource = "rec-brief"
	// recIngestSource is a Standard Webhooks ingest door (reconciler crm)
	// whose events claimd dispatches to a copy of the durable example.
	recIngestSource = "rec-ingest"
)

// recLeaseSeconds is the pay workflows' lease: short, so that a killed
// worker's claim goes unknown (lease policy review) soon after the kill.
const recLeaseSeconds = 10

// recDelaySeconds is the delay_seconds of the reconcilers that can answer
// not_done (crm, brief): a claim whose lease ended while its execution was
// only slow (a loaded machine, a re-dispatched event whose dispatch timed
// out) is judged only after that execution had time to run its payment.
// With 0, such an execution paid after the search found nothing, and the
// not_done then let a second execution pay again (two payments): the
// early judgement delay_seconds exists to prevent.
const recDelaySeconds = 20

// recMaxCalls is the max_calls of the slow and junk reconcilers.
const recMaxCalls = 3

// reconcileDeadline bounds each wait for claimd's reconcile to settle a
// claim or give up (lease expiry, the sweep, n8n's queue, backoff).
const reconcileDeadline = 3 * time.Minute

// reconcilerHeader is the reconcile webhook's Header Auth header, sent by
// claimd from reconcilers.<name>.headers.
const reconcilerHeader = "X-Reconcile-Token"

// reconcilerCredID is the Header Auth credential of the reconcile webhook.
const reconcilerCredID = "icE2eReconCred01"

// payDest is the destination stand-in: a payments API that records every
// POST /payments as a new payment under its Idempotency-Key header (it does
// not deduplicate: the count per key is the number of effects), and answers
// GET /payments?idempotency_key=K with {"data": [{"id", ...}]}, the payments
// made with that key, oldest first. Per key, a POST can be held before the
// payment is made (the caller dies before the effect) or after it (the
// caller dies after the effect, before the answer), and a search can be
// held; a held request whose caller went away ends without doing anything
// more.
type payDest struct {
	URL string

	mu         sync.Mutex
	payments   map[string][]string
	attempts   map[string]int
	abandoned  map[string]int // held before the payment, caller gone: no payment
	searches   map[string]int
	total      int
	holdBefore map[string]chan struct{}
	holdAfter  map[string]chan struct{}
	holdSearch map[string]chan struct{}
}

func newPayDest(t testing.TB) *payDest {
	t.Helper()
	d := &payDest{payments: map[string][]string{}, attempts: map[string]int{}, abandoned: map[string]int{},
		searches: map[string]int{}, holdBefore: map[string]chan struct{}{}, holdAfter: map[string]chan struct{}{},
		holdSearch: map[string]chan struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", d.servePay)
	mux.HandleFunc("GET /payments", d.serveSearch)
	srv := httptest.NewServer(mux)
	d.URL = srv.URL
	t.Cleanup(func() {
		d.ReleaseAll()
		srv.Close()
	})
	return d
}

func (d *payDest) servePay(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	if key == "" {
		http.Error(w, `{"error":"Idempotency-Key header required"}`, http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	d.attempts[key]++
	before := d.holdBefore[key]
	d.mu.Unlock()
	if before != nil {
		select {
		case <-before:
		case <-r.Context().Done():
			d.mu.Lock()
			d.abandoned[key]++
			d.mu.Unlock()
			return
		}
	}
	d.mu.Lock()
	d.total++
	id := fmt.Sprintf("pay_%d", d.total)
	d.payments[key] = append(d.payments[key], id)
	after := d.holdAfter[key]
	d.mu.Unlock()
	if after != nil {
		select {
		case <-after:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "effect_id": id, "idempotency_key": key})
}

func (d *payDest) serveSearch(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("idempotency_key")
	d.mu.Lock()
	d.searches[key]++
	hold := d.holdSearch[key]
	d.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	d.mu.Lock()
	data := []map[string]any{}
	for _, id := range d.payments[key] {
		data = append(data, map[string]any{"id": id, "idempotency_key": key})
	}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// hold makes the next requests of kind ("before", "after", "search") for
// key wait until release(kind, key).
func (d *payDest) hold(kind, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.holds(kind)
	if m[key] == nil {
		m[key] = make(chan struct{})
	}
}

// release lets the held requests of kind for key go on and holds no more.
func (d *payDest) release(kind, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.holds(kind)
	if ch := m[key]; ch != nil {
		close(ch)
		delete(m, key)
	}
}

func (d *payDest) holds(kind string) map[string]chan struct{} {
	switch kind {
	case "before":
		return d.holdBefore
	case "after":
		return d.holdAfter
	case "search":
		return d.holdSearch
	}
	panic("payDest: unknown hold " + kind)
}

// ReleaseAll lets every held request go on.
func (d *payDest) ReleaseAll() {
	for _, kind := range []string{"before", "after", "search"} {
		d.mu.Lock()
		keys := make([]string, 0)
		for k := range d.holds(kind) {
			keys = append(keys, k)
		}
		d.mu.Unlock()
		for _, k := range keys {
			d.release(kind, k)
		}
	}
}

// Payments is the payments made with key, oldest first.
func (d *payDest) Payments(key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.payments[key]...)
}

// waitFor polls cond (read under the lock) until it holds or deadline.
func (d *payDest) waitFor(t testing.TB, what string, deadline time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		d.mu.Lock()
		ok := cond()
		d.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("destination: %s not seen within %s", what, deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// relayCall is one reconcile call claimd made, as the relay saw it.
type relayCall struct {
	ClaimID string
	Call    int
	Status  int    // n8n's answer status; 0 when the call was cut
	Answer  string // n8n's answer body (bounded)
}

// reconcileRelay stands between claimd and n8n's webhook process for the
// reconcile calls: the sources file is written before n8n picks its ports,
// so the reconcilers' URLs point here and the relay forwards each request,
// headers and body as sent, to the n8n webhook set once n8n runs. It
// records each call (claim, call number, n8n's answer) for the counts.
type reconcileRelay struct {
	URL string

	mu      sync.Mutex
	targets map[string]string // relay path → n8n webhook URL
	calls   []relayCall
}

func newReconcileRelay(t testing.TB) *reconcileRelay {
	t.Helper()
	rl := &reconcileRelay{targets: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(rl.serve))
	rl.URL = srv.URL
	t.Cleanup(srv.Close)
	return rl
}

func (rl *reconcileRelay) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var body struct {
		ClaimID string `json:"claim_id"`
		Call    int    `json:"call"`
	}
	_ = json.Unmarshal(raw, &body)
	rl.mu.Lock()
	target := rl.targets[r.URL.Path]
	i := len(rl.calls)
	rl.calls = append(rl.calls, relayCall{ClaimID: body.ClaimID, Call: body.Call})
	rl.mu.Unlock()
	if target == "" {
		http.Error(w, "relay: no target yet", http.StatusServiceUnavailable)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target, bytes.NewReader(raw))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return // the caller (claimd) went away, or n8n did: the call is cut
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	rl.mu.Lock()
	rl.calls[i].Status, rl.calls[i].Answer = resp.StatusCode, string(out)
	rl.mu.Unlock()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// route makes the relay forward requests for path to target.
func (rl *reconcileRelay) route(path, target string) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.targets[path] = target
}

// Calls is the calls made about claimID, in arrival order.
func (rl *reconcileRelay) Calls(claimID string) []relayCall {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	var out []relayCall
	for _, c := range rl.calls {
		if c.ClaimID == claimID {
			out = append(out, c)
		}
	}
	return out
}

// reconcileView is the reconcile part of a claim record (GET /v1/claims/{id}).
type reconcileView struct {
	State      string `json:"state"`
	Reconciler string `json:"reconciler"`
	Calls      int    `json:"calls"`
	MaxCalls   int    `json:"max_calls"`
	LastError  string `json:"last_error"`
	Verdict    string `json:"verdict"`
}

// logEntry is one delivery-log entry of a claim record.
type logEntry struct {
	Outcome string `json:"outcome"`
	Actor   string `json:"actor"`
	Detail  string `json:"detail"`
}

// claimDetail is GET /v1/claims/{id}: the record, its delivery log and its
// reconcile.
type claimDetail struct {
	claimRecord
	Deliveries []logEntry      `json:"deliveries"`
	Reconcile  *reconcileView  `json:"reconcile"`
	Raw        json.RawMessage `json:"-"`
}

func getClaimDetail(t testing.TB, c *Claimd, id string) claimDetail {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/v1/claims/"+id, nil)
	var d claimDetail
	if err := json.Unmarshal(body, &d); status != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/claims/%s: status %d, %v, %.300s", id, status, err, body)
	}
	d.Raw = body
	return d
}

// reconciledEntries counts the delivery-log entries a reconciler's verdict
// wrote (outcome reconciled_*).
func (d claimDetail) reconciledEntries() []logEntry {
	var out []logEntry
	for _, e := range d.Deliveries {
		if strings.HasPrefix(e.Outcome, "reconciled_") {
			out = append(out, e)
		}
	}
	return out
}

// outcomes lists the delivery log's outcomes, in order.
func (d claimDetail) outcomes() []string {
	out := make([]string, len(d.Deliveries))
	for i, e := range d.Deliveries {
		out[i] = e.Outcome
	}
	return out
}

// waitClaimDetail polls claim id until ok holds, or fails after deadline
// with the last record.
func waitClaimDetail(t testing.TB, c *Claimd, id, what string, deadline time.Duration, ok func(claimDetail) bool) claimDetail {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		d := getClaimDetail(t, c, id)
		if ok(d) {
			return d
		}
		if time.Now().After(end) {
			t.Fatalf("claim %s: not %s within %s; last record %.1500s", id, what, deadline, d.Raw)
		}
		time.Sleep(pollInterval)
	}
}

// metricValue is the value of metric with exactly the given labels
// (name="value" pairs in any order) in claimd's /metrics; 0 when absent.
func metricValue(t testing.TB, c *Claimd, metric string, labels ...string) float64 {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		all := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				all = false
			}
		}
		if !all {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		return v
	}
	return 0
}

// payWorkflowCopy writes a copy of the inline example (tag: its webhook
// path is inlinePath-tag) that claims under the source named by the
// delivery's body ("source"), with a lease of recLeaseSeconds, and whose
// protected call times out after timeout (0: the example's own).
func payWorkflowCopy(t testing.TB, vars exampleVars, tag string, timeout time.Duration) string {
	t.Helper()
	path := WriteExample(t, inlineExample, vars, tag)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var wf map[string]any
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	edited := 0
	for _, nd := range wf["nodes"].([]any) {
		node := nd.(map[string]any)
		params, _ := node["parameters"].(map[string]any)
		switch node["name"] {
		case "Idempotent Claim":
			params["source"] = "={{ $json.body.source }}"
			params["leaseSeconds"] = recLeaseSeconds
			edited++
		case "Call Protected API":
			if timeout > 0 {
				params["options"].(map[string]any)["timeout"] = timeout.Milliseconds()
			}
			edited++
		}
	}
	if edited != 2 {
		t.Fatalf("%s: Idempotent Claim or Call Protected API not found", inlineExample)
	}
	return WriteJSON(t, "inline-claim-"+tag+".json", wf)
}

// reconcileDeployment is one crashable claimd whose sources file names the
// reconcilers, and one n8n in queue mode (main, webhook process, two
// workers) running two copies of the inline example (payments to the
// destination stand-in), the reconcile example and the junk reconciler.
type reconcileDeployment struct {
	n      *N8N
	claimd *crashableClaimd
	dest   *payDest
	relay  *reconcileRelay
	// pay and payShort are the inline copies' ids; payPath and
	// payShortPath their webhook paths. payShort's protected call times
	// out after shortEffectTimeout: a held answer makes the claim unknown
	// through the workflow's own Fail.
	pay, payShort         string
	payPath, payShortPath string
	reconcileWF           string
	// durable is the durable example's copy that claimd's dispatcher
	// posts the ingested events of recIngestSource to; ingestSecret signs
	// them.
	durable      string
	ingestSecret string
	// owner is the test that started the deployment: processes started
	// again in a subtest stop when it ends.
	owner *testing.T
}

func startReconcileDeployment(t *testing.T) *reconcileDeployment {
	t.Helper()
	d := &reconcileDeployment{dest: newPayDest(t), relay: newReconcileRelay(t), owner: t}
	token := RandomHex(t, 24)
	hookToken := RandomHex(t, 24)
	d.ingestSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte(RandomHex(t, 16)))
	sources := fmt.Sprintf(`reconcilers:
  crm:
    url: %[1]s/crm
    headers: {%[2]s: %[3]q}
    delay_seconds: %[12]d
    timeout_seconds: 30
    answer_seconds: 30
    max_calls: 4
    backoff_base_seconds: 1
    backoff_cap_seconds: 2
  slow:
    url: %[1]s/slow
    headers: {%[2]s: %[3]q}
    delay_seconds: 0
    timeout_seconds: 2
    answer_seconds: 1
    max_calls: %[4]d
    backoff_base_seconds: 1
    backoff_cap_seconds: 2
  brief:
    url: %[1]s/crm
    headers: {%[2]s: %[3]q}
    delay_seconds: %[12]d
    timeout_seconds: 5
    answer_seconds: 1
    max_calls: 6
    backoff_base_seconds: 1
    backoff_cap_seconds: 2
  junk:
    url: %[1]s/junk
    headers: {%[2]s: %[3]q}
    delay_seconds: 0
    timeout_seconds: 30
    max_calls: %[4]d
    backoff_base_seconds: 1
    backoff_cap_seconds: 2
sources:
  %[5]s:
    lease_policy: review
    reconciler: crm
  %[6]s:
    lease_policy: review
    reconciler: slow
  %[7]s:
    lease_policy: review
    reconciler: junk
  %[11]s:
    lease_policy: review
    reconciler: brief
  %[8]s:
    tenant: e2e
    provider: standard-webhooks
    secrets: [%[9]q]
    forward:
      url: %[1]s/dispatch
      headers: {Authorization: %[10]q}
      timeout_seconds: 10
      max_attempts: 50
      backoff_base_seconds: 1
      backoff_cap_seconds: 2
    lease_policy: review
    reconciler: crm
`, d.relay.URL, reconcilerHeader, token, recMaxCalls, recSource, recSlowSource, recJunkSource,
		recIngestSource, d.ingestSecret, "Bearer "+hookToken, recBriefSource, recDelaySeconds)
	sourcesFile := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sourcesFile, []byte(sources), 0o600); err != nil {
		t.Fatalf("writing sources file: %v", err)
	}
	d.claimd = startCrashableClaimd(t, map[string]string{
		"CLAIMD_SOURCES_FILE": sourcesFile,
		// The lease sweep (review → unknown) and the reconcile runner
		// look every second.
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "1",
		"CLAIMD_RECONCILE_INTERVAL_SECONDS":   "1",
	})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", d.claimd.URL(), d.claimd.APIKey),
		{ID: reconcilerCredID, Name: "claimd reconciler token (e2e)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": reconcilerHeader, "value": token}},
		{ID: hookCredID, Name: "Sidecar dispatch token (e2e)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": "Authorization", "value": "Bearer " + hookToken}},
	})
	if d.claimd.Tenant != "e2e" {
		t.Fatalf("StartClaimd's tenant is %q; the sources file above names e2e", d.claimd.Tenant)
	}
	vars := exampleVars{"EFFECT_URL": d.dest.URL + "/payments", "CREDENTIAL_ID": claimCredID,
		"HOOK_CREDENTIAL_ID": hookCredID, "RECONCILER_CREDENTIAL_ID": reconcilerCredID, "DESTINATION_URL": d.dest.URL}
	pay := payWorkflowCopy(t, vars, "rc", 0)
	payShort := payWorkflowCopy(t, vars, "rt", shortEffectTimeout)
	d.payPath, d.payShortPath = inlinePath+"-rc", inlinePath+"-rt"
	durable := shortLeaseCopy(t, durableExample, vars, "rd")
	d.n = StartN8N(t, N8NConfig{
		Workflows: []string{pay, payShort, WriteExample(t, reconcileExample, vars, ""),
			WriteWorkflow(t, "testdata/reconcile-garbage.json", nil), durable},
		Credentials: []string{creds},
		NodePackage: nodePackageDir,
		Queue:       true, Workers: 2, WorkerConcurrency: 10, WebhookProcesses: 1,
	})
	d.pay, d.payShort, d.reconcileWF, d.durable = d.n.WorkflowIDs[0], d.n.WorkflowIDs[1], d.n.WorkflowIDs[2], d.n.WorkflowIDs[4]
	d.relay.route("/crm", d.n.WebhookURL(reconcilePath))
	d.relay.route("/slow", d.n.WebhookURL(reconcilePath))
	d.relay.route("/junk", d.n.WebhookURL(junkReconcilePath))
	d.relay.route("/dispatch", d.n.WebhookURL(durablePath+"-rd"))
	return d
}

// shortLeaseCopy writes a copy of example file (tag as in WriteExample)
// whose Idempotent Claim node takes a lease of recLeaseSeconds.
func shortLeaseCopy(t testing.TB, file string, vars exampleVars, tag string) string {
	t.Helper()
	path := WriteExample(t, file, vars, tag)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var wf map[string]any
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	found := false
	for _, nd := range wf["nodes"].([]any) {
		node := nd.(map[string]any)
		if node["name"] == "Idempotent Claim" {
			node["parameters"].(map[string]any)["leaseSeconds"] = recLeaseSeconds
			found = true
		}
	}
	if !found {
		t.Fatalf("%s has no node Idempotent Claim", file)
	}
	return WriteJSON(t, strings.TrimSuffix(file, ".json")+"-"+tag+"-lease.json", wf)
}

// recEvent is one order delivered to a pay workflow.
type recEvent struct {
	ID     string
	Source string
}

func newRecEvent(t testing.TB, prefix, source string) recEvent {
	return recEvent{ID: prefix + "_" + RandomHex(t, 6), Source: source}
}

func (e recEvent) body() map[string]any {
	return map[string]any{"id": e.ID, "type": "order.created", "amount": 4200, "source": e.Source}
}

func (d *reconcileDeployment) key(ev recEvent) string {
	return claim.IdempotencyKey(d.claimd.Tenant, claim.Key{Source: ev.Source, EventID: ev.ID})
}

// deliverAsync posts ev to the pay workflow at path and returns at once;
// the answer (or the transport error, expected when the worker running the
// execution is killed) arrives on the channel.
func (d *reconcileDeployment) deliverAsync(path string, ev recEvent) <-chan string {
	out := make(chan string, 1)
	raw, _ := json.Marshal(ev.body())
	go func() {
		resp, err := webhookClient.Post(d.n.WebhookURL(path), "application/json", bytes.NewReader(raw))
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		out <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	return out
}

// killWorkerOf kills (SIGKILL) the worker running workflowID's execution
// of ev and starts a fresh one, so that two workers stay to run the
// reconcile workflow and redeliveries. The fresh worker belongs to the
// deployment's test (d.owner), not to the subtest.
// It returns when the kill happened.
func (d *reconcileDeployment) killWorkerOf(t *testing.T, workflowID string, ev recEvent) time.Time {
	t.Helper()
	exec := executionOf(t, d.n, workflowID, ev.ID)
	w := workerRunning(t, d.n, exec, answerDeadline)
	pid := w.PID()
	w.Kill(t)
	killed := time.Now()
	t.Logf("killed %s (pid %d), which ran execution %s", w.Name, pid, exec)
	fresh := d.n.AddWorker(d.owner)
	t.Logf("started %s in its place", fresh.Name)
	return killed
}

// TestReconcileQueueMode is automatic reconciliation end to end, in n8n
// queue mode:
//
//	a) a worker killed after the effect: the claim goes unknown at its
//	   lease end (review), the reconciler finds the payment, the claim is
//	   completed with its id; one payment;
//	b) a worker killed before the effect: the reconciler finds nothing,
//	   answers not_done, the claim is retryable and the provider's
//	   redelivery runs the effect once; one payment;
//	b2) the same for an event taken in through claimd's ingest door: after
//	   not_done claimd dispatches the event again by itself;
//	c) reconcilers that time out or answer no valid verdict: asked
//	   max_calls times with backoff, then given up; the claim stays unknown
//	   for an operator, its record and the metrics say so;
//	d) claimd killed (SIGKILL), then stopped (SIGTERM), while a reconcile
//	   call is in flight: the claim settles with one verdict, one
//	   reconciled_* log entry, one payment; also when the cut call's
//	   answer comes only after its deadline (the next call settles it,
//	   the late answer is refused).
func TestReconcileQueueMode(t *testing.T) {
	t.Parallel()
	d := startReconcileDeployment(t)

	t.Run("a worker killed after the effect: reconciled done", func(t *testing.T) {
		ev := newRecEvent(t, "reca", recSource)
		key := d.key(ev)
		d.dest.hold("after", key)
		answer := d.deliverAsync(d.payPath, ev)
		d.dest.waitFor(t, "the payment", answerDeadline, func() bool { return len(d.dest.payments[key]) == 1 })
		killed := d.killWorkerOf(t, d.pay, ev)
		d.dest.release("after", key)
		rec := lookupClaim(t, d.claimd.Claimd, ev.Source, ev.ID)
		det := waitClaimDetail(t, d.claimd.Claimd, rec.ClaimID, "completed", reconcileDeadline,
			func(c claimDetail) bool { return c.State == "completed" })
		took := time.Since(killed)
		pays := d.dest.Payments(key)
		if len(pays) != 1 || det.ResultRef != pays[0] {
			t.Errorf("payments %v, claim result_ref %q: want one payment, its id the result_ref", pays, det.ResultRef)
		}
		rl := det.reconciledEntries()
		if len(rl) != 1 || rl[0].Outcome != "reconciled_done" || !strings.Contains(rl[0].Actor, "crm") {
			t.Errorf("delivery log %v (reconciled entries %+v): want one reconciled_done by reconciler crm", det.outcomes(), rl)
		}
		if count(det.outcomes(), "lease_expired") != 1 {
			t.Errorf("delivery log %v: want the lease expiry that made the claim unknown", det.outcomes())
		}
		calls := d.relay.Calls(rec.ClaimID)
		t.Logf("delivery after the kill: %s", waitAnswer(answer))
		// A redelivery is a duplicate with the destination's reference.
		if a := deliver(t, d.n, d.payPath, ev.body(), nil); a.Code != http.StatusOK || a.Status != "duplicate" || a.ResultRef != pays[0] {
			t.Errorf("redelivery: %s (result_ref %q), want 200 duplicate with %q", a, a.ResultRef, pays[0])
		}
		if n := len(d.dest.Payments(key)); n != 1 {
			t.Errorf("payments after the redelivery: %d, want 1", n)
		}
		t.Logf("SUMMARY a) worker SIGKILLed after the effect: kill → completed by reconciler in %s; reconcile calls %d; "+
			"claim completed result_ref %s; payments at destination %d; log %v",
			took.Round(100*time.Millisecond), len(calls), det.ResultRef, len(d.dest.Payments(key)), det.outcomes())
	})

	t.Run("b worker killed before the effect: reconciled not done, run once more", func(t *testing.T) {
		ev := newRecEvent(t, "recb", recSource)
		key := d.key(ev)
		d.dest.hold("before", key)
		answer := d.deliverAsync(d.payPath, ev)
		d.dest.waitFor(t, "the payment request", answerDeadline, func() bool { return d.dest.attempts[key] == 1 })
		d.killWorkerOf(t, d.pay, ev)
		// The held request ends with its caller: no payment.
		d.dest.waitFor(t, "the payment request's caller gone", answerDeadline, func() bool { return d.dest.abandoned[key] == 1 })
		d.dest.release("before", key)
		rec := lookupClaim(t, d.claimd.Claimd, ev.Source, ev.ID)
		det := waitClaimDetail(t, d.claimd.Claimd, rec.ClaimID, "reconciled not done", reconcileDeadline,
			func(c claimDetail) bool { return len(c.reconciledEntries()) > 0 || c.State == "completed" })
		if det.State != "retryable_failed" || len(det.reconciledEntries()) != 1 || det.reconciledEntries()[0].Outcome != "reconciled_not_done" {
			t.Fatalf("after the reconcile: state %s, log %v; want retryable_failed after one reconciled_not_done", det.State, det.outcomes())
		}
		if n := len(d.dest.Payments(key)); n != 0 {
			t.Fatalf("payments before the redelivery: %d, want 0", n)
		}
		t.Logf("delivery whose worker was killed: %s", waitAnswer(answer))
		// The provider delivers the event again: it wins the claim and
		// pays once.
		a := deliver(t, d.n, d.payPath, ev.body(), nil)
		pays := d.dest.Payments(key)
		if a.Code != http.StatusOK || a.Status != "done" || len(pays) != 1 || a.ResultRef != pays[0] {
			t.Errorf("redelivery after not_done: %s (result_ref %q), payments %v; want 200 done, one payment", a, a.ResultRef, pays)
		}
		fin := getClaimDetail(t, d.claimd.Claimd, rec.ClaimID)
		if fin.State != "completed" || fin.Attempt != 2 || len(fin.reconciledEntries()) != 1 {
			t.Errorf("claim after the redelivery: %s at attempt %d, log %v; want completed at attempt 2, one reconciled entry",
				fin.State, fin.Attempt, fin.outcomes())
		}
		t.Logf("SUMMARY b) worker SIGKILLed before the effect: reconcile calls %d, verdict not_done → retryable_failed; "+
			"redelivery %s; claim %s at attempt %d; payments at destination %d; log %v",
			len(d.relay.Calls(rec.ClaimID)), a, fin.State, fin.Attempt, len(pays), fin.outcomes())
	})

	t.Run("b2 ingested event, worker killed before the effect: not done, claimd dispatches it again", func(t *testing.T) {
		msgID := "msg_" + RandomHex(t, 8)
		ev := recEvent{ID: msgID, Source: recIngestSource}
		key := d.key(ev)
		d.dest.hold("before", key)
		body, err := json.Marshal(map[string]any{"id": "order_" + RandomHex(t, 6), "type": "order.created", "amount": 4200})
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Now().Unix()
		sig, err := verifytest.StandardWebhooks(d.ingestSecret, msgID, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		a := post(t, d.claimd.URL()+"/ingest/"+recIngestSource, body,
			map[string]string{"webhook-id": msgID, "webhook-timestamp": strconv.FormatInt(ts, 10), "webhook-signature": sig})
		var rc ingestReceipt
		if a.Code != http.StatusOK || json.Unmarshal(a.Raw, &rc) != nil || len(rc.Received) != 1 || rc.Received[0].EventID != msgID {
			t.Fatalf("ingest: %s, want 200 with one receipt for event %s", a, msgID)
		}
		id := rc.Received[0].ClaimID
		d.dest.waitFor(t, "the payment request", answerDeadline, func() bool { return d.dest.attempts[key] == 1 })
		d.killWorkerOf(t, d.durable, ev)
		d.dest.waitFor(t, "the payment request's caller gone", answerDeadline, func() bool { return d.dest.abandoned[key] == 1 })
		d.dest.release("before", key)
		// Nothing more from the test: claimd reconciles, then dispatches
		// the event again, and the workflow pays once.
		det := waitClaimDetail(t, d.claimd.Claimd, id, "completed", reconcileDeadline,
			func(c claimDetail) bool { return c.State == "completed" })
		pays := d.dest.Payments(key)
		rl := det.reconciledEntries()
		if len(pays) != 1 || det.ResultRef != pays[0] || det.Attempt != 2 || len(rl) != 1 || rl[0].Outcome != "reconciled_not_done" {
			t.Errorf("payments %v; claim result_ref %q at attempt %d, log %v: want one payment, its id the result_ref, "+
				"attempt 2, one reconciled_not_done", pays, det.ResultRef, det.Attempt, det.outcomes())
		}
		var in inboxEvent
		status, raw := d.claimd.Do(t, 0, http.MethodGet, "/v1/inbox/"+id, nil)
		if status != http.StatusOK || json.Unmarshal(raw, &in) != nil || in.DispatchState != "dispatched" {
			t.Errorf("GET /v1/inbox/%s: %d %.300s, want dispatched", id, status, raw)
		}
		t.Logf("SUMMARY b2) ingested event, worker SIGKILLed before the effect: reconcile calls %d, verdict not_done; "+
			"claimd dispatched it again (dispatch attempts %d, %s); claim %s at attempt %d; payments at destination %d; log %v",
			len(d.relay.Calls(id)), in.DispatchAttempts, in.DispatchState, det.State, det.Attempt, len(pays), det.outcomes())
	})

	t.Run("c reconcilers that time out or answer garbage: bounded, then left to the operator", func(t *testing.T) {
		slow, junk := newRecEvent(t, "recc_slow", recSlowSource), newRecEvent(t, "recc_junk", recJunkSource)
		ids := map[string]string{}
		for _, ev := range []recEvent{slow, junk} {
			key := d.key(ev)
			d.dest.hold("after", key)
			if ev == slow {
				d.dest.hold("search", key) // the reconcile workflow never answers in time
			}
			a := deliver(t, d.n, d.payShortPath, ev.body(), nil)
			d.dest.release("after", key)
			if a.Code != http.StatusInternalServerError || a.Status != "failed" {
				t.Errorf("%s: delivery whose payment answer timed out: %s, want 500 failed (unknown)", ev.ID, a)
			}
			ids[ev.Source] = lookupClaim(t, d.claimd.Claimd, ev.Source, ev.ID).ClaimID
		}
		for _, tc := range []struct {
			ev         recEvent
			reconciler string
			lastError  string
		}{{slow, "slow", "timeout"}, {junk, "junk", "bad_answer"}} {
			id := ids[tc.ev.Source]
			det := waitClaimDetail(t, d.claimd.Claimd, id, "given up", reconcileDeadline,
				func(c claimDetail) bool { return c.Reconcile != nil && c.Reconcile.State == "gave_up" })
			rc := det.Reconcile
			if det.State != "unknown" || rc.Calls != recMaxCalls || rc.MaxCalls != recMaxCalls || rc.LastError != tc.lastError ||
				rc.Reconciler != tc.reconciler {
				t.Errorf("%s: claim %s, reconcile %+v; want unknown, %d of %d calls by %s, last_error %s",
					tc.ev.ID, det.State, *rc, recMaxCalls, recMaxCalls, tc.reconciler, tc.lastError)
			}
			if n := count(det.outcomes(), "reconcile_gave_up"); n != 1 || len(det.reconciledEntries()) != 0 {
				t.Errorf("%s: delivery log %v, want one reconcile_gave_up and no reconciled_* entry", tc.ev.ID, det.outcomes())
			}
			calls := d.relay.Calls(id)
			gaveUp := metricValue(t, d.claimd.Claimd, "claimd_reconcile_gave_up_total", `reconciler="`+tc.reconciler+`"`)
			failed := metricValue(t, d.claimd.Claimd, "claimd_reconcile_calls_total", `reconciler="`+tc.reconciler+`"`, `result="`+tc.lastError+`"`)
			if len(calls) != recMaxCalls || gaveUp != 1 || failed != recMaxCalls {
				t.Errorf("%s: %d calls reached the relay, claimd_reconcile_gave_up_total{%s} %v, calls_total{%s} %v; want %d, 1, %d",
					tc.ev.ID, len(calls), tc.reconciler, gaveUp, tc.lastError, failed, recMaxCalls, recMaxCalls)
			}
			t.Logf("SUMMARY c) reconciler %s (%s): %d calls (max_calls %d), then gave_up; claim %s; "+
				"claimd_reconcile_gave_up_total{reconciler=%q} %v; payments at destination %d",
				tc.reconciler, tc.lastError, len(calls), recMaxCalls, det.State, tc.reconciler, gaveUp, len(d.dest.Payments(d.key(tc.ev))))
		}
		// The held searches end now; the answers of those old calls find
		// the reconcile given up and change nothing.
		d.dest.release("search", d.key(slow))
		d.n.WaitExecutionsSettled(t, d.reconcileWF, reconcileDeadline)
		if det := getClaimDetail(t, d.claimd.Claimd, ids[recSlowSource]); det.State != "unknown" || det.Reconcile.State != "gave_up" {
			t.Errorf("after the late answers: claim %s, reconcile %+v; want unknown, gave_up", det.State, det.Reconcile)
		}
	})

	for _, mode := range []string{"SIGKILL", "SIGTERM"} {
		t.Run("d claimd "+mode+" while a reconcile call is in flight", func(t *testing.T) {
			ev := newRecEvent(t, "recd", recSource)
			key := d.key(ev)
			d.dest.hold("after", key)
			d.dest.hold("search", key)
			a := deliver(t, d.n, d.payShortPath, ev.body(), nil)
			d.dest.release("after", key)
			if a.Code != http.StatusInternalServerError || a.Status != "failed" {
				t.Fatalf("delivery whose payment answer timed out: %s, want 500 failed (unknown)", a)
			}
			id := lookupClaim(t, d.claimd.Claimd, ev.Source, ev.ID).ClaimID
			// Call 1 is in flight: the reconcile workflow searches the
			// destination, which holds the search.
			d.dest.waitFor(t, "the reconciler's search", reconcileDeadline, func() bool { return d.dest.searches[key] >= 1 })
			if mode == "SIGKILL" {
				d.claimd.crash(t)
			} else {
				d.claimd.Procs[0].Stop(t)
			}
			d.claimd.restart(t)
			d.dest.release("search", key)
			det := waitClaimDetail(t, d.claimd.Claimd, id, "completed", reconcileDeadline,
				func(c claimDetail) bool { return c.State == "completed" })
			pays := d.dest.Payments(key)
			rl := det.reconciledEntries()
			if len(pays) != 1 || det.ResultRef != pays[0] || len(rl) != 1 || rl[0].Outcome != "reconciled_done" {
				t.Errorf("payments %v, claim result_ref %q, log %v: want one payment, its id the result_ref, one reconciled_done",
					pays, det.ResultRef, det.outcomes())
			}
			// Every call still open ends; the record does not change.
			d.n.WaitExecutionsSettled(t, d.reconcileWF, reconcileDeadline)
			fin := getClaimDetail(t, d.claimd.Claimd, id)
			if fin.State != "completed" || len(fin.reconciledEntries()) != 1 || fin.ResultRef != det.ResultRef {
				t.Errorf("after every reconcile execution ended: claim %s, result_ref %q, log %v; want it unchanged",
					fin.State, fin.ResultRef, fin.outcomes())
			}
			calls := d.relay.Calls(id)
			if len(calls) == 0 || calls[0].Status != 0 {
				t.Errorf("relay saw calls %+v; want call 1 cut with claimd (no answer reached it)", calls)
			}
			t.Logf("SUMMARY d) claimd %s during reconcile call 1 (cut; the workflow's answer reached the restarted claimd "+
				"through the API): reconcile calls %d, searches %d, reconciled entries %d, claim %s result_ref %s, "+
				"payments at destination %d; log %v",
				mode, len(calls), d.dest.searchCount(key), len(fin.reconciledEntries()), fin.State, fin.ResultRef, len(pays), fin.outcomes())
		})
	}

	t.Run("d2 claimd SIGKILL mid-call, the answer comes after the call's deadline: the next call settles it", func(t *testing.T) {
		ev := newRecEvent(t, "recd2", recBriefSource)
		key := d.key(ev)
		d.dest.hold("after", key)
		d.dest.hold("search", key)
		a := deliver(t, d.n, d.payShortPath, ev.body(), nil)
		d.dest.release("after", key)
		if a.Code != http.StatusInternalServerError || a.Status != "failed" {
			t.Fatalf("delivery whose payment answer timed out: %s, want 500 failed (unknown)", a)
		}
		id := lookupClaim(t, d.claimd.Claimd, ev.Source, ev.ID).ClaimID
		d.dest.waitFor(t, "the reconciler's first search", reconcileDeadline, func() bool { return d.dest.searches[key] >= 1 })
		errorsBefore := d.n.ExecutionStatuses(t, d.reconcileWF)["error"]
		d.claimd.crash(t)
		d.claimd.restart(t)
		// Call 1 stays in flight (its search held) past its deadline; the
		// restarted claimd expires it and makes call 2, which reaches the
		// destination too.
		d.dest.waitFor(t, "the reconciler's second search", reconcileDeadline, func() bool { return d.dest.searches[key] >= 2 })
		d.dest.release("search", key)
		det := waitClaimDetail(t, d.claimd.Claimd, id, "completed", reconcileDeadline,
			func(c claimDetail) bool { return c.State == "completed" })
		d.n.WaitExecutionsSettled(t, d.reconcileWF, reconcileDeadline)
		fin := getClaimDetail(t, d.claimd.Claimd, id)
		pays := d.dest.Payments(key)
		rl := fin.reconciledEntries()
		if len(pays) != 1 || fin.ResultRef != pays[0] || fin.ResultRef != det.ResultRef || len(rl) != 1 || rl[0].Outcome != "reconciled_done" {
			t.Errorf("payments %v, claim %s result_ref %q, log %v: want one payment, its id the result_ref, one reconciled_done",
				pays, fin.State, fin.ResultRef, fin.outcomes())
		}
		calls := d.relay.Calls(id)
		if len(calls) < 2 || calls[0].Status != 0 {
			t.Errorf("relay saw calls %+v; want call 1 cut with claimd, then at least one more", calls)
		}
		late := d.n.ExecutionStatuses(t, d.reconcileWF)["error"] - errorsBefore
		t.Logf("SUMMARY d2) claimd SIGKILL during reconcile call 1, its answer held past the call's deadline: reconcile calls %d "+
			"(call 1 expired, its late answer refused: %d reconcile execution(s) ended in error), searches %d, reconciled entries %d, "+
			"claim %s result_ref %s, payments at destination %d; log %v",
			len(calls), late, d.dest.searchCount(key), len(rl), fin.State, fin.ResultRef, len(pays), fin.outcomes())
	})
}

// searchCount is the number of searches for key.
func (d *payDest) searchCount(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.searches[key]
}

// waitAnswer is the answer of an asynchronous delivery once it came, or a
// note that it has not yet (a killed worker's delivery may hang a while).
func waitAnswer(ch <-chan string) string {
	select {
	case a := <-ch:
		return a
	default:
		return "(not answered yet)"
	}
}
