package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The trigger door: the provider posts to the Idempotent Claim Trigger in
// n8n, claimd decides the delivery with the source's rules before any
// execution exists, and the settle hook (EXTERNAL_HOOK_FILES) completes or
// fails the claim when the execution ends.
const (
	// triggerNodeType is the trigger node's type name in n8n.
	triggerNodeType = NodePackageName + ".idempotentClaimTrigger"
	// triggerExample is the shipped example: trigger on source "stripe" →
	// protected HTTP Request to __EFFECT_URL__, no Claim/Complete node.
	triggerExample = "trigger.json"
	// triggerSource is the example's source, configured in claimd as a
	// Stripe source without forward (used by the trigger only).
	triggerSource = "stripe"
	// settleHookFile is the settle hook, relative to the node package.
	settleHookFile = "hooks/idempotent-claim.js"
	// failTag tags the example's copy whose execution fails after its
	// effect (a Stop and Error node behind the protected call).
	failTag = "f"
)

// Storm sizes: 30 events × 7 copies, delivered 70 at a time (10 events'
// copies per wave, so copies of one event meet), then 5 changed payloads.
const (
	triggerEvents  = 30
	triggerCopies  = 7
	triggerWave    = 70
	triggerChanged = 5
)

// settleDeadline bounds the wait for an execution to end and its claim to
// be settled by the hook; worker crashes have their own, longer deadline.
const settleDeadline = 3 * time.Minute

// triggerDeployment is one claimd (crashable: the outage check stops and
// starts it on the same address and database) and one n8n running the
// trigger example and its failing copy with the settle hook, against one
// Counter.
type triggerDeployment struct {
	n       *N8N
	claimd  *crashableClaimd
	counter *Counter
	// gate stands between the settle hook and claimd (the hook's
	// IDEMPOTENT_CLAIM_URL); it passes everything through unless held.
	gate *settleGate
	// secret is the Stripe source's signing secret.
	secret string
	// wf and failing are the workflow ids of the example and of its copy
	// that fails after the effect; path and failingPath their trigger
	// webhook paths.
	wf, failing       string
	path, failingPath string
}

// startTriggerDeployment starts claimd with the Stripe source and n8n
// (queue: main, two workers and one webhook process that serves the
// providers) with the trigger example, its failing copy and the settle
// hook in every process.
func startTriggerDeployment(t *testing.T, queue bool) *triggerDeployment {
	t.Helper()
	d := &triggerDeployment{counter: NewCounter(t), secret: "whsec_" + RandomHex(t, 24)}
	sources := writeStripeTriggerSources(t, triggerSource, d.secret)
	d.claimd = startCrashableClaimd(t, map[string]string{"CLAIMD_SOURCES_FILE": sources})
	d.gate = newSettleGate(t, d.claimd.URL())
	if d.claimd.Tenant != "e2e" {
		t.Fatalf("StartClaimd's tenant is %q; the sources file names e2e", d.claimd.Tenant)
	}
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", d.claimd.URL(), d.claimd.APIKey),
	})
	effectURL := d.counter.URL + "/effect"
	vars := exampleVars{"EFFECT_URL": effectURL, "CREDENTIAL_ID": claimCredID}
	wf := WriteExample(t, triggerExample, vars, "")
	failing := failAfterEffect(t, WriteExample(t, triggerExample, vars, failTag), effectURL)
	cfg := N8NConfig{
		Workflows:   []string{wf, failing},
		Credentials: []string{creds},
		NodePackage: nodePackageDir,
		HookFiles:   []string{settleHookFile},
		Env: map[string]string{
			"IDEMPOTENT_CLAIM_URL":     d.gate.URL,
			"IDEMPOTENT_CLAIM_API_KEY": d.claimd.APIKey,
			// n8n's default pool answers a 70-way storm on two cores with
			// "503 Database is not ready!" (N8N.md).
			"DB_POSTGRESDB_POOL_SIZE": "10",
		},
	}
	if queue {
		cfg.Queue, cfg.Workers, cfg.WorkerConcurrency, cfg.WebhookProcesses = true, 2, 10, 1
	}
	d.n = StartN8N(t, cfg)
	d.wf, d.failing = d.n.WorkflowIDs[0], d.n.WorkflowIDs[1]
	d.path, d.failingPath = triggerPath(t, wf), triggerPath(t, failing)
	return d
}

// triggerPath is the production webhook path of the workflow's trigger node.
func triggerPath(t testing.TB, file string) string {
	t.Helper()
	for _, node := range readWorkflow(t, file).Nodes {
		if node.Type != triggerNodeType {
			continue
		}
		if p, _ := node.Parameters["path"].(string); p != "" {
			return p
		}
		t.Fatalf("workflow %s: the trigger node has no path parameter", file)
	}
	t.Fatalf("workflow %s has no %s node", file, triggerNodeType)
	return ""
}

// failAfterEffect rewrites the workflow at path so that its execution fails
// right after the protected call: a Stop and Error node on the call's
// success output (the call is the node whose url is effectURL).
func failAfterEffect(t testing.TB, path, effectURL string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var wf map[string]any
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("workflow %s: %v", path, err)
	}
	nodes, _ := wf["nodes"].([]any)
	effect := ""
	var pos []any
	for _, nd := range nodes {
		node, _ := nd.(map[string]any)
		if params, _ := node["parameters"].(map[string]any); params["url"] == effectURL {
			effect, _ = node["name"].(string)
			pos, _ = node["position"].([]any)
		}
	}
	if effect == "" || len(pos) != 2 {
		t.Fatalf("workflow %s: no node calls %s", path, effectURL)
	}
	x, _ := pos[0].(float64)
	y, _ := pos[1].(float64)
	wf["nodes"] = append(nodes, map[string]any{
		"id": uuidLike(t), "name": "Fail After Effect", "type": "n8n-nodes-base.stopAndError", "typeVersion": 1,
		"position":   []any{x + 240, y + 160},
		"parameters": map[string]any{"errorMessage": "e2e: a node after the effect failed"},
	})
	conns, _ := wf["connections"].(map[string]any)
	if conns == nil {
		conns = map[string]any{}
		wf["connections"] = conns
	}
	out, _ := conns[effect].(map[string]any)
	if out == nil {
		out = map[string]any{}
		conns[effect] = out
	}
	mains, _ := out["main"].([]any)
	if len(mains) == 0 {
		mains = []any{[]any{}}
	}
	first, _ := mains[0].([]any)
	mains[0] = append(first, map[string]any{"node": "Fail After Effect", "type": "main", "index": 0})
	out["main"] = mains
	return WriteJSON(t, strings.TrimSuffix(filepath.Base(path), ".json")+"-fails.json", wf)
}

// stripeEvent is one Stripe event as the tests deliver it.
type stripeEvent struct {
	ID     string
	Amount int
}

func newStripeEvent(t testing.TB, prefix string) stripeEvent {
	return stripeEvent{ID: "evt_" + prefix + "_" + RandomHex(t, 6), Amount: 4200}
}

// body is the event as Stripe posts it: the same bytes for every copy.
func (e stripeEvent) body() []byte {
	b, _ := json.Marshal(map[string]any{
		"id": e.ID, "object": "event", "type": "payment_intent.succeeded", "created": 1767225600,
		"api_version": "2024-06-20", "livemode": false,
		"data": map[string]any{"object": map[string]any{"id": "pi_" + strings.TrimPrefix(e.ID, "evt_"),
			"object": "payment_intent", "amount": e.Amount, "currency": "eur"}},
	})
	return b
}

// key is the idempotency key of ev: the key the protected call forwards
// and the Counter counts.
func (d *triggerDeployment) key(ev stripeEvent) string {
	return claim.IdempotencyKey(d.claimd.Tenant, claim.Key{Source: triggerSource, EventID: ev.ID})
}

// deliver posts ev to the trigger webhook at path, signed as Stripe signs
// each attempt (a fresh t) with secret, through the i-th process serving
// production webhooks.
func (d *triggerDeployment) deliver(t testing.TB, i int, path string, ev stripeEvent, secret string) answer {
	t.Helper()
	body := ev.body()
	return post(t, d.n.WebhookURLAt(i, path), body,
		map[string]string{"Stripe-Signature": verifytest.StripeHeader(time.Now().Unix(), body, secret)})
}

// outcomes are the claim outcomes in the answer to the provider (claimd's
// ingest receipt: {"received": [{"event_id", "claim_id", "outcome"}]}).
func outcomes(a answer) []string {
	var body struct {
		Received []struct {
			Outcome string `json:"outcome"`
		} `json:"received"`
	}
	if json.Unmarshal(a.Raw, &body) != nil {
		return nil
	}
	out := make([]string, len(body.Received))
	for i, r := range body.Received {
		out[i] = r.Outcome
	}
	return out
}

// outcome describes a trigger answer for tallies: status and the one
// event's outcome.
func outcome(a answer) string {
	if o := outcomes(a); len(o) == 1 {
		return fmt.Sprintf("%d %s", a.Code, o[0])
	}
	return a.String()
}

// TestTriggerRegularMode drives the trigger example in a regular-mode n8n:
// the storm, a bad signature, the hook completing a claim, an execution
// failing after its effect, and claimd down while the hook settles.
func TestTriggerRegularMode(t *testing.T) {
	t.Parallel()
	d := startTriggerDeployment(t, false)
	runTriggerChecks(t, d)
	t.Run("n8n stopped while a settle is on its way: it waits for it", func(t *testing.T) {
		checkStopWaitsForSettle(t, d)
	})
}

// TestTriggerQueueMode is the same in queue mode (main, one webhook process
// serving the provider, two workers), then a worker killed between the
// effect and the end of its execution.
func TestTriggerQueueMode(t *testing.T) {
	t.Parallel()
	d := startTriggerDeployment(t, true)
	runTriggerChecks(t, d)
	t.Run("a worker killed after the effect: unknown, one effect", func(t *testing.T) {
		checkWorkerCrash(t, d)
	})
}

// runTriggerChecks runs the checks both modes share, in order.
func runTriggerChecks(t *testing.T, d *triggerDeployment) {
	t.Run("storm: 30 events × 7 copies and 5 changed payloads", func(t *testing.T) { checkTriggerStorm(t, d) })
	t.Run("bad signature: refused, nothing claimed, no execution", func(t *testing.T) { checkBadSignature(t, d) })
	t.Run("the hook completes the claim with the execution", func(t *testing.T) { checkHookCompletes(t, d) })
	t.Run("failure after the effect: unknown, no second effect", func(t *testing.T) { checkFailAfterEffect(t, d) })
	t.Run("claimd down while the hook settles", func(t *testing.T) { checkClaimdDownAtSettle(t, d) })
	checkNoFailedExecutions(t, d.n, d.wf)
}

// checkTriggerStorm: 30 Stripe events × 7 signed copies in three waves of
// 70 concurrent deliveries, then 5 copies of already delivered events with
// a changed body → exactly one execution and one effect per event (30, not
// 210), every claim completed by the hook with its execution as result,
// and exactly 5 conflicts that start nothing.
func checkTriggerStorm(t *testing.T, d *triggerDeployment) {
	events := make([]stripeEvent, triggerEvents)
	keys := make([]string, len(events))
	for i := range events {
		events[i] = newStripeEvent(t, fmt.Sprintf("storm%02d", i))
		keys[i] = d.key(events[i])
	}
	before := executionIDs(t, d.n, d.wf)
	effectsBefore := d.counter.Total()
	conflictsBefore := metricSum(t, d.claimd.Claimd, "claimd_conflicts_total")

	perWave := triggerWave / triggerCopies
	answers := make([][]answer, len(events))
	began := time.Now()
	for first := 0; first < len(events); first += perWave {
		wave := events[first:min(first+perWave, len(events))]
		got := make([]answer, len(wave)*triggerCopies)
		Parallel(len(got), func(i int) {
			got[i] = d.deliver(t, i, d.path, wave[i%len(wave)], d.secret)
		})
		for i, a := range got {
			answers[first+i%len(wave)] = append(answers[first+i%len(wave)], a)
		}
	}
	t.Logf("%d deliveries answered in %s", len(events)*triggerCopies, time.Since(began).Round(time.Millisecond))
	var all []string
	for i, ev := range events {
		won := 0
		for _, a := range answers[i] {
			all = append(all, outcome(a))
			switch o := outcomes(a); {
			case a.Code == http.StatusOK && len(o) == 1 && o[0] == "won":
				won++
			case a.Code == http.StatusOK && len(o) == 1 && o[0] == "duplicate":
			case a.Code == http.StatusServiceUnavailable && len(o) == 1 && o[0] == "in_progress":
				if n, err := strconv.Atoi(a.RetryAfter); err != nil || n < 1 {
					t.Errorf("%s: 503 in_progress with Retry-After %q, want whole seconds", ev.ID, a.RetryAfter)
				}
			default:
				t.Errorf("%s: unexpected answer %s", ev.ID, a)
			}
		}
		if won != 1 {
			t.Errorf("%s: %d of %d copies answered won, want exactly 1", ev.ID, won, triggerCopies)
		}
	}
	t.Logf("answers: %v", tallyStrings(all))

	// Same event ids, changed bodies, after the originals were claimed.
	changed := make([]answer, triggerChanged)
	Parallel(len(changed), func(i int) {
		ev := events[i]
		ev.Amount++
		changed[i] = d.deliver(t, i, d.path, ev, d.secret)
	})
	for i, a := range changed {
		if o := outcomes(a); a.Code != http.StatusOK || len(o) != 1 || o[0] != "conflict" {
			t.Errorf("changed payload of %s: %s, want 200 conflict", events[i].ID, outcome(a))
		}
	}

	recs := waitClaimStates(t, d.claimd.Claimd, events, "completed", settleDeadline)
	st := d.n.WaitExecutionsSettled(t, d.wf, settleDeadline)
	added := newIDs(executionIDs(t, d.n, d.wf), before)
	if len(added) != triggerEvents {
		t.Errorf("executions of the trigger workflow: %d new (by status now %v), want exactly %d (one per event, not %d)",
			len(added), st, triggerEvents, triggerEvents*triggerCopies+triggerChanged)
	}
	checkEffects(t, d.counter, "30 events × 7 copies through the trigger", 1, keys...)
	if got := d.counter.Total() - effectsBefore; got != triggerEvents {
		t.Errorf("effects during the storm: %d, want %d", got, triggerEvents)
	}
	if got := metricSum(t, d.claimd.Claimd, "claimd_conflicts_total") - conflictsBefore; got != triggerChanged {
		t.Errorf("claimd_conflicts_total grew by %d, want %d", got, triggerChanged)
	}
	refs := map[string]string{}
	for i, rec := range recs {
		want := 0
		if i < triggerChanged {
			want = 1
		}
		if rec.ConflictCount != want {
			t.Errorf("%s: conflict_count %d, want %d", events[i].ID, rec.ConflictCount, want)
		}
		if rec.Attempt != 1 {
			t.Errorf("%s: attempt %d, want 1", events[i].ID, rec.Attempt)
		}
		exec := executionOf(t, d.n, d.wf, events[i].ID)
		if !added[exec] || !namesExecution(rec.ResultRef, exec) {
			t.Errorf("%s: result_ref %q, want it to name its execution %s (one of the storm's)", events[i].ID, rec.ResultRef, exec)
		}
		if other, dup := refs[rec.ResultRef]; dup {
			t.Errorf("%s and %s share result_ref %q", other, events[i].ID, rec.ResultRef)
		}
		refs[rec.ResultRef] = events[i].ID
	}
}

// checkBadSignature: deliveries with a wrong secret or no signature are
// refused with the source's unauthenticated_status (401), claim nothing
// and start no execution; the same event signed right is then won.
func checkBadSignature(t *testing.T, d *triggerDeployment) {
	ev := newStripeEvent(t, "badsig")
	before := executionIDs(t, d.n, d.wf)
	if a := d.deliver(t, 0, d.path, ev, "whsec_not-the-secret-0123456789"); a.Code != http.StatusUnauthorized {
		t.Errorf("delivery signed with another secret: %s, want 401", a)
	}
	a := post(t, d.n.WebhookURL(d.path), ev.body(), nil)
	if a.Code != http.StatusUnauthorized {
		t.Errorf("delivery without Stripe-Signature: %s, want 401", a)
	}
	if strings.Contains(string(a.Raw), ev.ID) {
		t.Errorf("the refusal echoes the event: %.300s", a.Raw)
	}
	if _, found := findClaim(t, d.claimd.Claimd, triggerSource, ev.ID); found {
		t.Errorf("a refused delivery left a claim record")
	}
	d.n.WaitExecutionsSettled(t, d.wf, settleDeadline)
	if added := newIDs(executionIDs(t, d.n, d.wf), before); len(added) != 0 {
		t.Errorf("refused deliveries started %d execution(s), want none", len(added))
	}
	if got := d.counter.Attempts(d.key(ev)); got != 0 {
		t.Errorf("refused deliveries reached the effect %d time(s)", got)
	}
	if a := d.deliver(t, 0, d.path, ev, d.secret); a.Code != http.StatusOK || outcome(a) != "200 won" {
		t.Errorf("the same event signed right: %s, want 200 won (the refusals stored nothing)", outcome(a))
	}
	waitClaimStates(t, d.claimd.Claimd, []stripeEvent{ev}, "completed", settleDeadline)
	checkEffects(t, d.counter, "signed right after two refusals", 1, d.key(ev))
}

// findClaim looks up the record of (source, eventID); found is false when
// claimd answers 404.
func findClaim(t testing.TB, c *Claimd, source, eventID string) (claimRecord, bool) {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/v1/claims?source="+url.QueryEscape(source)+"&event_id="+url.QueryEscape(eventID), nil)
	if status == http.StatusNotFound {
		return claimRecord{}, false
	}
	var rec claimRecord
	if status != http.StatusOK || json.Unmarshal(body, &rec) != nil {
		t.Fatalf("GET claim %s/%s: status %d, body %.300s", source, eventID, status, body)
	}
	return rec, true
}

// waitClaimStates polls until the record of every event (source
// triggerSource) is in state want and returns them in events order.
func waitClaimStates(t testing.TB, c *Claimd, events []stripeEvent, want string, deadline time.Duration) []claimRecord {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		recs := make([]claimRecord, len(events))
		var off []string
		for i, ev := range events {
			rec, found := findClaim(t, c, triggerSource, ev.ID)
			recs[i] = rec
			if !found || rec.State != want {
				off = append(off, ev.ID+"="+rec.State)
			}
		}
		if len(off) == 0 {
			return recs
		}
		if time.Now().After(end) {
			t.Fatalf("%d record(s) not %s within %s: %v", len(off), want, deadline, off)
		}
		time.Sleep(pollInterval)
	}
}

// executionIDs is the set of ids of the workflow's stored executions, all
// statuses, from n8n's execution_entity.
func executionIDs(t testing.TB, n *N8N, workflowID string) map[string]bool {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	rows, err := conn.Query(ctx, `SELECT id::text FROM execution_entity WHERE "workflowId" = $1 AND "deletedAt" IS NULL`, workflowID)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("reading n8n executions: %v", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	return out
}

// newIDs is the ids in now that are not in before.
func newIDs(now, before map[string]bool) map[string]bool {
	out := map[string]bool{}
	for id := range now {
		if !before[id] {
			out[id] = true
		}
	}
	return out
}

// executionOf returns the id of the one execution of the workflow whose
// stored data holds eventID (the trigger's item carries the event), ""
// when there is none; more than one fails the test.
func executionOf(t testing.TB, n *N8N, workflowID, eventID string) string {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	rows, err := conn.Query(ctx, `SELECT e.id::text FROM execution_entity e
		JOIN execution_data d ON d."executionId" = e.id
		WHERE e."workflowId" = $1 AND e."deletedAt" IS NULL AND strpos(d.data, $2) > 0`, workflowID, eventID)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("reading n8n executions: %v", err)
		}
		ids = append(ids, id)
	}
	if len(ids) > 1 {
		t.Errorf("event %s has %d executions %v, want one", eventID, len(ids), ids)
	}
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// namesExecution reports whether ref names execution id as a whole number
// ("execution 12" or ".../executions/12", never "112").
func namesExecution(ref, id string) bool {
	if id == "" {
		return false
	}
	return regexp.MustCompile(`(^|\D)` + regexp.QuoteMeta(id) + `(\D|$)`).MatchString(ref)
}

// metricSum sums the samples of metric (every label set) in claimd's
// /metrics.
func metricSum(t testing.TB, c *Claimd, metric string) int {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if line != metric && !strings.HasPrefix(line, metric+" ") && !strings.HasPrefix(line, metric+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	}
	return int(total)
}

// tallyStrings counts equal strings.
func tallyStrings(ss []string) map[string]int {
	m := map[string]int{}
	for _, s := range ss {
		m[s]++
	}
	return m
}

// writeStripeTriggerSources writes a sources file holding one Stripe
// trigger source (no forward) of tenant e2e, lease policy review, with
// secret, and returns its path for CLAIMD_SOURCES_FILE.
func writeStripeTriggerSources(t *testing.T, name, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`sources:
  %s:
    tenant: e2e
    provider: stripe
    secrets: [%q]
    lease_policy: review
`, name, secret)), 0o600); err != nil {
		t.Fatalf("writing sources file: %v", err)
	}
	return path
}
