package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// `make overhead`: what each way of keeping a webhook's side effect to one
// run per event costs a delivery in a real n8n, won and duplicate, side by
// side from one run. The recipes, in n8n's regular mode with n8n's database
// on PostgreSQL (as in docker-compose.yml):
//
//	1  plain              Webhook → Set                       (no deduplication)
//	2  Remove Duplicates  Webhook → Remove Duplicates → Set   (n8n's node, v2, "Remove
//	                      Items Processed in Previous Executions", value = the event id)
//	3  Claim + Complete   Webhook → Idempotent Claim (v2) → Set → Complete
//	4  trigger            Idempotent Claim Trigger → Set      (nothing in n8n settles the
//	                      claim: the test completes it out of band, between the phases)
//	5  trigger + hook     Idempotent Claim Trigger → Set, the settle hook completes the claim
//
// Set ("Protected Step") stands for the side effect; Remove Duplicates'
// and Claim's other outputs lead nowhere, so a duplicate ends there.
//
// Same answer for all: every workflow answers "When Last Node Finishes"
// (all entries of the last node), so that everything n8n does for a
// delivery is inside the time the client measures and nothing of it comes
// after: the trigger's call to claimd, the nodes, n8n's write of the
// finished execution and the workflow.postExecute hooks (the settle hook
// by default holds nothing: it sends its settle on the next timer turn,
// after n8n answered; with IDEMPOTENT_CLAIM_SETTLE_WAIT_MS above 0 it holds
// the end of an execution until its first try landed, at most that
// long). With "Immediately" (the trigger's default) n8n answers once the
// execution is created: Remove Duplicates',
// Claim's, Complete's and the hook's work would come after the answer,
// unseen by a paced client, and only the trigger's claimd call would
// count. With a Respond to Webhook node n8n's write of the execution and
// the hook's settle would come after it (and the trigger answers only
// through version 1 of that node). A duplicate the trigger refuses is
// answered by the trigger itself at once (claimd's answer: 200, outcome
// duplicate), with no execution; Remove Duplicates and Claim answer a
// duplicate with the empty list their execution ends with.
//
// Two n8n processes, each with its own database: A without the settle hook
// (recipes 1–4) and B with it (EXTERNAL_HOOK_FILES, every process; recipe
// 5, B's own plain workflow 1' and Remove Duplicates again, 2', so that
// recipe 5 is also compared with Remove Duplicates in the same n8n: the
// row 5 − 2', free of the two instances' difference, which 1' − 1 shows
// to be a few milliseconds either way). External hooks are per process, and
// the hook completes every won claim it finds in an ended execution, so a
// trigger workflow without a settle (4) cannot run next to it. In regular
// mode the hook's presence costs other workflows only its own call
// (n8n 2.41.1 loads full execution data for postExecute hooks in queue
// mode only: WorkflowRunner.needsFullExecutionData is read in
// enqueueExecution); the run measures it as 1' − 1 rather than assuming
// it. Each recipe is compared with the plain workflow of its own n8n.
//
// Recipes 3, 4 and 5 each call their own claimd (one database each, same
// PostgreSQL server), so claimd's own time is known per recipe and phase,
// from its request log (per request) and its /metrics histogram
// (claimd_http_request_duration_seconds). Trigger deliveries go to a
// trigger source (stripe provider, no forward, lease_policy review) and
// are signed as Stripe signs them (verifytest); every recipe gets the
// same request (a Stripe event, its Stripe-Signature header).
//
// Timing: one request at a time, each after an idle gap, the six
// workflows (1–5 and 1') interleaved in an order that rotates and
// reverses. The run is rounds; in each, every workflow gets ROUND new
// event ids (won), then, once those executions ended and their claims are
// completed, the same events again (duplicates). Per round and phase the
// p50 and p95 of each workflow's client-side latency; the report gives the
// medians of rounds, and each recipe's added latency as the median of its
// per-round difference from its n8n's plain workflow. n8n executions per
// delivery are counted in n8n's execution_entity per workflow before and
// after each phase. n8n's own time per node comes from the stored
// executions (runData executionTime).
//
// No recipe measures two No Op nodes, or the same two calls with n8n's HTTP
// Request node: those answered a one-off question (N8N.md, "What the node
// costs per execution") and would add two more workflows to every round;
// the per-node times below still show where a recipe's time goes.
//
// Figures only: the test fails on functional errors (a non-2xx answer, a
// claim not won, a duplicate not recognised, a duplicate that started an
// execution through the trigger, a claim not completed by the hook within
// overheadHookDeadline, an execution that did not succeed), never on a
// figure.

// Overhead workflow templates (testdata/), the trigger source, and the
// routes of claimd the recipes call.
const (
	overheadPlainWF     = "testdata/overhead-plain.json"
	overheadRemoveDupWF = "testdata/overhead-remove-duplicates.json"
	overheadClaimWF     = "testdata/overhead-claim.json"
	overheadTriggerWF   = "testdata/overhead-trigger.json"

	// overheadSource is the trigger source in claimd's sources file.
	overheadSource = "stripe"
	// overheadHookFile is the settle hook, relative to the node package.
	overheadHookFile = "hooks/idempotent-claim.js"
	// overheadHookDeadline bounds the wait for the hook's completions
	// after a won phase (it holds each execution's end ≤ 1 s for them).
	overheadHookDeadline = 30 * time.Second

	overheadClaimCredID   = "icOvhClaimCred01"
	overheadTriggerCredID = "icOvhTrigCred001"
)

// claimd's calls, by the route it logs: what each recipe's deliveries cost
// claimd.
const (
	callClaim    = "claim"    // POST /v1/claims/batch (Claim node)
	callComplete = "complete" // POST /v1/claims/complete/batch (Complete node, hook)
	callTrigger  = "trigger"  // POST /v1/trigger/{source} (the trigger)
)

// overheadCall names the call a claimd route serves ("" for the others).
func overheadCall(route string) string {
	switch {
	case route == "/v1/claims/batch":
		return callClaim
	case route == "/v1/claims/complete/batch":
		return callComplete
	case strings.HasPrefix(route, "/v1/trigger/"):
		return callTrigger
	}
	return ""
}

// The two phases of a round.
const (
	phaseWon = iota
	phaseDup
)

var phaseNames = [2]string{"won", "duplicate"}

// overheadSettings are the run's knobs, from the environment.
type overheadSettings struct {
	n, warmup, round int
	gap              time.Duration
}

func overheadEnvInt(t *testing.T, name string, def, min int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		t.Fatalf("%s=%q: want a whole number ≥ %d", name, v, min)
	}
	return n
}

// overheadKind is what a workflow does with a delivery.
type overheadKind int

const (
	kindPlain overheadKind = iota
	kindRemoveDup
	kindClaim
	kindTrigger
)

// overheadRecipe is one workflow of the run with its samples.
type overheadRecipe struct {
	// label and name head the report's rows; tag marks the event ids.
	label, name, shape, tag string
	kind                    overheadKind
	n                       *N8N
	wfID, path              string
	// base is the plain workflow of the same n8n (nil for a plain one).
	base *overheadRecipe
	// claimd is the sidecar the recipe calls (nil: none); calls are the
	// calls a won delivery makes (a duplicate makes the first only).
	claimd *Claimd
	calls  []string
	// outOfBand: the test completes the won claims (recipe 4); hook: the
	// settle hook does (recipe 5).
	outOfBand, hook bool

	// lat[phase][round] are the client-side latencies (ms) of the
	// measured rounds.
	lat [2][][]float64
	// sent and execs count the measured deliveries and the n8n executions
	// they created, per phase.
	sent, execs [2]int
	// side[phase][call] is claimd's own time per request (ms, its log),
	// sideSum/sideCount the /metrics histogram's deltas (s, requests).
	side      [2]map[string][]float64
	sideSum   [2]map[string]float64
	sideCount [2]map[string]float64
	// execTime[phase] (stoppedAt − startedAt, ms) and nodes[phase][node]
	// (executionTime, ms) of the measured executions, from n8n's database.
	execTime [2][]float64
	nodes    [2]map[string][]float64
	// pending are the won claims of the current round that the test
	// completes out of band (outOfBand only).
	pending []map[string]string
}

// overheadEvent is one Stripe event: the same bytes for every copy.
type overheadEvent struct {
	id   string
	body []byte
}

func newOverheadEvent(t testing.TB, tag string, round, i int) overheadEvent {
	id := fmt.Sprintf("evt_ovh_%s_%d_%03d_%s", tag, round, i, RandomHex(t, 4))
	body, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": "payment_intent.succeeded", "created": 1767225600,
		"api_version": "2024-06-20", "livemode": false,
		"data": map[string]any{"object": map[string]any{"id": "pi_" + strings.TrimPrefix(id, "evt_"),
			"object": "payment_intent", "amount": 4200, "currency": "eur"}},
	})
	return overheadEvent{id: id, body: body}
}

// overheadSnap is the state the test compares across a phase: claimd's
// /metrics and log size per sidecar, n8n's executions per workflow and
// the last execution id per n8n.
type overheadSnap struct {
	scrape map[*Claimd]claimdScrape
	logOff map[*Claimd]int64
	execs  map[*overheadRecipe]int
	maxID  map[*N8N]int64
}

// overheadRange is the executions (ids lo < id ≤ hi) of one n8n during
// one measured phase.
type overheadRange struct {
	n      *N8N
	lo, hi int64
	phase  int
}

// overheadRun is the run's state.
type overheadRun struct {
	set     overheadSettings
	recipes []*overheadRecipe
	claimds []*Claimd
	n8ns    []*N8N
	secret  string
	client  *http.Client
	ranges  []overheadRange
}

// TestOverhead is `make overhead` (runs only with IC_OVERHEAD=1). Knobs:
// IC_OVERHEAD_N (measured events per workflow, each delivered twice: won,
// then duplicate; default 200), IC_OVERHEAD_ROUND (events per round,
// default 40: 5 rounds), IC_OVERHEAD_WARMUP (events of the unmeasured
// first round, default 20; 0: none), IC_OVERHEAD_GAP_MS (idle time before
// each request, default 100), IC_OVERHEAD_N8N_ENV (extra settings of both
// n8n, "K=V K2=V2", e.g. DB_POSTGRESDB_POOL_SIZE=4 or
// N8N_EXPRESSION_ENGINE=legacy; default none), IC_OVERHEAD_NODE_DIR
// (another build of the node package to measure: a folder with
// package.json, dist/ and hooks/; default n8n-node/).
func TestOverhead(t *testing.T) {
	if os.Getenv("IC_OVERHEAD") != "1" {
		t.Skip("IC_OVERHEAD=1 measures what each deduplication recipe costs a delivery (make overhead)")
	}
	o := &overheadRun{set: overheadSettings{
		n:      overheadEnvInt(t, "IC_OVERHEAD_N", 200, 10),
		warmup: overheadEnvInt(t, "IC_OVERHEAD_WARMUP", 20, 0),
		gap:    time.Duration(overheadEnvInt(t, "IC_OVERHEAD_GAP_MS", 100, 0)) * time.Millisecond,
		round:  overheadEnvInt(t, "IC_OVERHEAD_ROUND", 40, 5),
	}}
	o.secret = "whsec_" + RandomHex(t, 24)
	began := time.Now()

	sources := writeStripeTriggerSources(t, overheadSource, o.secret)
	withSources := ClaimdConfig{Env: map[string]string{"CLAIMD_SOURCES_FILE": sources}}
	cClaim, cTrigger, cHook := StartClaimd(t, ClaimdConfig{}), StartClaimd(t, withSources), StartClaimd(t, withSources)
	for _, c := range []*Claimd{cTrigger, cHook} {
		if c.Tenant != "e2e" {
			t.Fatalf("StartClaimd's tenant is %q; the sources file names e2e", c.Tenant)
		}
	}
	o.claimds = []*Claimd{cClaim, cTrigger, cHook}

	vars := map[string]string{"SOURCE": overheadSource}
	claimVars := map[string]string{"SOURCE": overheadSource, "CREDENTIAL_ID": overheadClaimCredID}
	triggerVars := map[string]string{"SOURCE": overheadSource, "CREDENTIAL_ID": overheadTriggerCredID}
	nodeDir := nodePackageDir
	if v := os.Getenv("IC_OVERHEAD_NODE_DIR"); v != "" {
		nodeDir = v
	}

	// n8n A: recipes 1–4, no hook.
	credsA := WriteJSON(t, "credentials-a.json", []credential{
		claimCredential(overheadClaimCredID, "Idempotent Claim API (recipe 3)", cClaim.URL(), cClaim.APIKey),
		claimCredential(overheadTriggerCredID, "Idempotent Claim API (recipe 4)", cTrigger.URL(), cTrigger.APIKey),
	})
	nA := StartN8N(t, N8NConfig{
		Workflows: []string{WriteWorkflow(t, overheadPlainWF, vars), WriteWorkflow(t, overheadRemoveDupWF, vars),
			WriteWorkflow(t, overheadClaimWF, claimVars), WriteWorkflow(t, overheadTriggerWF, triggerVars)},
		Credentials: []string{credsA}, NodePackage: nodeDir, Env: overheadN8NEnv(t),
	})
	// n8n B: recipe 5, its own plain workflow and Remove Duplicates again
	// (2'), the settle hook loaded: recipe 5 against Remove Duplicates in
	// the same n8n, free of the two instances' difference.
	credsB := WriteJSON(t, "credentials-b.json", []credential{
		claimCredential(overheadTriggerCredID, "Idempotent Claim API (recipe 5)", cHook.URL(), cHook.APIKey),
	})
	envB := overheadN8NEnv(t)
	envB["IDEMPOTENT_CLAIM_URL"] = cHook.URL()
	envB["IDEMPOTENT_CLAIM_API_KEY"] = cHook.APIKey
	nB := StartN8N(t, N8NConfig{
		Workflows: []string{WriteWorkflow(t, overheadPlainWF, vars), WriteWorkflow(t, overheadTriggerWF, triggerVars),
			WriteWorkflow(t, overheadRemoveDupWF, vars)},
		Credentials: []string{credsB}, NodePackage: nodeDir, HookFiles: []string{overheadHookFile}, Env: envB,
	})
	o.n8ns = []*N8N{nA, nB}
	started := time.Since(began)

	plainA := &overheadRecipe{label: "1", name: "plain", shape: "Webhook → Set", tag: "p", kind: kindPlain,
		n: nA, wfID: nA.WorkflowIDs[0], path: "ic-overhead-plain"}
	plainB := &overheadRecipe{label: "1'", name: "plain, hook loaded", shape: "Webhook → Set (n8n B)", tag: "pb", kind: kindPlain,
		n: nB, wfID: nB.WorkflowIDs[0], path: "ic-overhead-plain"}
	o.recipes = []*overheadRecipe{
		plainA,
		{label: "2", name: "Remove Duplicates", shape: "Webhook → Remove Duplicates → Set", tag: "rd", kind: kindRemoveDup,
			n: nA, wfID: nA.WorkflowIDs[1], path: "ic-overhead-remove-duplicates", base: plainA},
		{label: "3", name: "Claim + Complete", shape: "Webhook → Claim → Set → Complete", tag: "cl", kind: kindClaim,
			n: nA, wfID: nA.WorkflowIDs[2], path: "ic-overhead-claim", base: plainA,
			claimd: cClaim, calls: []string{callClaim, callComplete}},
		{label: "4", name: "trigger", shape: "Claim Trigger → Set", tag: "tr", kind: kindTrigger,
			n: nA, wfID: nA.WorkflowIDs[3], path: "ic-overhead-trigger", base: plainA,
			claimd: cTrigger, calls: []string{callTrigger}, outOfBand: true},
		plainB,
		{label: "2'", name: "Remove Duplicates, hook loaded", shape: "Webhook → Remove Duplicates → Set (n8n B)", tag: "rdb", kind: kindRemoveDup,
			n: nB, wfID: nB.WorkflowIDs[2], path: "ic-overhead-remove-duplicates", base: plainB},
		{label: "5", name: "trigger + hook", shape: "Claim Trigger → Set, hook (n8n B)", tag: "th", kind: kindTrigger,
			n: nB, wfID: nB.WorkflowIDs[1], path: "ic-overhead-trigger", base: plainB,
			claimd: cHook, calls: []string{callTrigger, callComplete}, hook: true},
	}
	for _, r := range o.recipes {
		for p := range 2 {
			r.side[p], r.sideSum[p], r.sideCount[p] = map[string][]float64{}, map[string]float64{}, map[string]float64{}
			r.nodes[p] = map[string][]float64{}
		}
	}

	// One kept-alive connection per n8n: the client's own connection
	// set-up is not part of any workflow's cost.
	o.client = &http.Client{Timeout: answerDeadline, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer o.client.CloseIdleConnections()

	if o.set.warmup > 0 {
		o.runRound(t, -1, o.set.warmup)
	}
	firstMeasured := map[*N8N]int64{}
	for _, n := range o.n8ns {
		firstMeasured[n] = maxExecutionID(t, n)
	}
	measureBegan := time.Now()
	rounds := 0
	for done := 0; done < o.set.n; done += o.set.round {
		o.runRound(t, rounds, min(o.set.round, o.set.n-done))
		rounds++
	}
	measured := time.Since(measureBegan)

	for _, n := range o.n8ns {
		readOverheadExecutions(t, n, firstMeasured[n], o.recipes, o.ranges)
	}
	for _, r := range o.recipes {
		for p := range 2 {
			if len(r.execTime[p]) != r.execs[p] {
				t.Errorf("%s %s, %s: %d stored executions read, %d counted", r.label, r.name, phaseNames[p], len(r.execTime[p]), r.execs[p])
			}
		}
	}
	fmt.Print(o.report(t, rounds, started, measured, time.Since(began)))
}

// order is the order of the recipes for the i-th delivery of a phase: it
// rotates and reverses, so that no workflow always follows the same one.
func (o *overheadRun) order(i int) []int {
	k := len(o.recipes)
	out := make([]int, k)
	for j := range out {
		out[j] = (i/2 + j) % k
	}
	if i%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// runRound delivers size new events to every workflow (won), then the same
// events again (duplicates), checking every answer and what each phase
// left in n8n and claimd. round < 0 is the warm-up (checked, not kept).
func (o *overheadRun) runRound(t *testing.T, round, size int) {
	t.Helper()
	roundBegan := time.Now()
	events := map[*overheadRecipe][]overheadEvent{}
	for _, r := range o.recipes {
		for i := range size {
			events[r] = append(events[r], newOverheadEvent(t, r.tag, round, i))
		}
		r.pending = nil
	}
	for phase := range 2 {
		if phase == phaseDup {
			o.completeOutOfBand(t)
		}
		before := o.snapshot(t)
		lat := map[*overheadRecipe][]float64{}
		for i := range size {
			for _, k := range o.order(i) {
				r := o.recipes[k]
				time.Sleep(o.set.gap)
				lat[r] = append(lat[r], o.deliver(t, r, events[r][i], phase))
			}
		}
		for _, n := range o.n8ns {
			n.WaitExecutionsSettled(t, "", 2*time.Minute)
		}
		if phase == phaseWon {
			o.waitHookCompleted(t, before, size)
		}
		after := o.snapshot(t)
		o.checkPhase(t, round, phase, size, before, after)
		if round < 0 {
			continue
		}
		for _, n := range o.n8ns {
			o.ranges = append(o.ranges, overheadRange{n: n, lo: before.maxID[n], hi: after.maxID[n], phase: phase})
		}
		for _, r := range o.recipes {
			r.lat[phase] = append(r.lat[phase], lat[r])
			r.sent[phase] += size
			r.execs[phase] += after.execs[r] - before.execs[r]
			if r.claimd == nil {
				continue
			}
			for call, ms := range claimdLogLatencies(t, r.claimd.Procs[0].LogPath, before.logOff[r.claimd], after.logOff[r.claimd]) {
				r.side[phase][call] = append(r.side[phase][call], ms...)
			}
			b, a := before.scrape[r.claimd], after.scrape[r.claimd]
			for call := range a.count {
				r.sideCount[phase][call] += a.count[call] - b.count[call]
				r.sideSum[phase][call] += a.sum[call] - b.sum[call]
			}
		}
	}
	what := fmt.Sprintf("round %d", round+1)
	if round < 0 {
		what = "warm-up round"
	}
	t.Logf("%s: %d events × %d workflows, won and duplicate, in %s", what, size, len(o.recipes), time.Since(roundBegan).Round(time.Second))
}

// deliver posts ev to r's webhook, signed as Stripe signs each attempt,
// checks the answer against what phase expects of r, and returns the
// client-side latency in ms.
func (o *overheadRun) deliver(t *testing.T, r *overheadRecipe, ev overheadEvent, phase int) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.n.WebhookURL(r.path), strings.NewReader(string(ev.body)))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", verifytest.StripeHeader(time.Now().Unix(), ev.body, o.secret))
	began := time.Now()
	resp, err := o.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s, %s delivery of %s: %v", r.label, r.name, phaseNames[phase], ev.id, err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	elapsed := time.Since(began)
	if err != nil {
		t.Fatalf("%s %s, %s delivery of %s: reading the answer: %v", r.label, r.name, phaseNames[phase], ev.id, err)
	}
	if problem := o.checkAnswer(r, ev, phase, resp.StatusCode, raw); problem != "" {
		t.Fatalf("%s %s, %s delivery of %s: %s: %s %.400s", r.label, r.name, phaseNames[phase], ev.id, problem, resp.Status, raw)
	}
	return float64(elapsed.Microseconds()) / 1000
}

// overheadItem is one entry of a workflow's answer (the last node's items).
type overheadItem struct {
	Body struct {
		ID string `json:"id"`
	} `json:"body"`
	Idempotency *struct {
		Outcome    string `json:"outcome"`
		ClaimID    string `json:"claim_id"`
		ClaimToken string `json:"claim_token"`
	} `json:"idempotency"`
}

// checkAnswer returns what is wrong with an answer ("" when nothing). Won:
// 200 with the Set's one item for the event (the claim won for Claim and
// the trigger). Duplicate: plain runs again (one item); Remove Duplicates
// and Claim end with no item (200 []); the trigger answers claimd's
// receipt with outcome duplicate.
func (o *overheadRun) checkAnswer(r *overheadRecipe, ev overheadEvent, phase, status int, raw []byte) string {
	if status != http.StatusOK {
		return "not 200"
	}
	if phase == phaseDup && r.kind == kindTrigger {
		var receipt struct {
			Received []struct {
				EventID string `json:"event_id"`
				Outcome string `json:"outcome"`
			} `json:"received"`
		}
		if json.Unmarshal(raw, &receipt) != nil || len(receipt.Received) != 1 ||
			receipt.Received[0].EventID != ev.id || receipt.Received[0].Outcome != "duplicate" {
			return "the trigger did not answer outcome duplicate"
		}
		return ""
	}
	var items []overheadItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return "not the last node's items"
	}
	if phase == phaseDup && (r.kind == kindRemoveDup || r.kind == kindClaim) {
		if len(items) != 0 {
			return "the duplicate was not recognised (it reached Set)"
		}
		return ""
	}
	if len(items) != 1 || items[0].Body.ID != ev.id {
		return "want the one item of the event"
	}
	if r.kind == kindTrigger {
		idem := items[0].Idempotency
		if idem == nil || idem.Outcome != "won" || idem.ClaimID == "" || idem.ClaimToken == "" {
			return "the claim was not won"
		}
		if r.outOfBand {
			r.pending = append(r.pending, map[string]string{
				"claim_id": idem.ClaimID, "claim_token": idem.ClaimToken, "result_ref": "overhead: completed by the test"})
		}
	}
	return ""
}

// completeOutOfBand completes the won claims of recipe 4 (no settle in
// its n8n) through claimd's API, outside the measured phases.
func (o *overheadRun) completeOutOfBand(t *testing.T) {
	t.Helper()
	for _, r := range o.recipes {
		if !r.outOfBand || len(r.pending) == 0 {
			continue
		}
		before := scrapeClaimd(t, r.claimd)
		status, body := r.claimd.Do(t, 0, http.MethodPost, "/v1/claims/complete/batch", map[string]any{"claims": r.pending})
		if status != http.StatusOK {
			t.Fatalf("%s %s: completing its claims: status %d %.300s", r.label, r.name, status, body)
		}
		if done := scrapeClaimd(t, r.claimd).completed - before.completed; done != float64(len(r.pending)) {
			t.Fatalf("%s %s: %v of %d claims completed by the test: %.300s", r.label, r.name, done, len(r.pending), body)
		}
		r.pending = nil
	}
}

// waitHookCompleted waits until the settle hook has completed the claims
// of the won phase that began at before (size per hook recipe).
func (o *overheadRun) waitHookCompleted(t *testing.T, before overheadSnap, size int) {
	t.Helper()
	for _, r := range o.recipes {
		if !r.hook {
			continue
		}
		end := time.Now().Add(overheadHookDeadline)
		for {
			done := scrapeClaimd(t, r.claimd).completed - before.scrape[r.claimd].completed
			if done >= float64(size) {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%s %s: the hook completed %v of %d won claims within %s of the phase's end", r.label, r.name, done, size, overheadHookDeadline)
			}
			time.Sleep(pollInterval)
		}
	}
}

// snapshot reads what checkPhase compares.
func (o *overheadRun) snapshot(t *testing.T) overheadSnap {
	t.Helper()
	s := overheadSnap{scrape: map[*Claimd]claimdScrape{}, logOff: map[*Claimd]int64{},
		execs: map[*overheadRecipe]int{}, maxID: map[*N8N]int64{}}
	for _, c := range o.claimds {
		s.scrape[c] = scrapeClaimd(t, c)
		s.logOff[c] = fileSize(t, c.Procs[0].LogPath)
	}
	for _, n := range o.n8ns {
		s.maxID[n] = maxExecutionID(t, n)
		counts := executionsPerWorkflow(t, n)
		for _, r := range o.recipes {
			if r.n == n {
				s.execs[r] = counts[r.wfID]
			}
		}
	}
	return s
}

// checkPhase checks what a phase of size deliveries per workflow left:
// one execution per won delivery, none per duplicate through the
// trigger; in claimd, every claim won (won phase) or a duplicate, and
// completed by its recipe's settle.
func (o *overheadRun) checkPhase(t *testing.T, round, phase, size int, before, after overheadSnap) {
	t.Helper()
	what := fmt.Sprintf("round %d, %s phase", round+1, phaseNames[phase])
	if round < 0 {
		what = "warm-up, " + phaseNames[phase] + " phase"
	}
	for _, r := range o.recipes {
		added := after.execs[r] - before.execs[r]
		switch {
		case phase == phaseWon && added != size:
			t.Errorf("%s: %s %s: %d n8n executions for %d won deliveries, want one each", what, r.label, r.name, added, size)
		case phase == phaseDup && r.kind == kindTrigger && added != 0:
			t.Errorf("%s: %s %s: %d duplicate deliveries started %d n8n executions, want none", what, r.label, r.name, size, added)
		}
		if r.claimd == nil {
			continue
		}
		b, a := before.scrape[r.claimd], after.scrape[r.claimd]
		want, got := "won", a.outcomes["won"]-b.outcomes["won"]
		if phase == phaseDup {
			want, got = "duplicate", a.outcomes["duplicate"]-b.outcomes["duplicate"]
		}
		if got != float64(size) {
			t.Errorf("%s: %s %s: claimd decided %v claims %s, want %d", what, r.label, r.name, got, want, size)
		}
		completed := a.completed - b.completed
		wantCompleted := 0
		if phase == phaseWon && !r.outOfBand {
			wantCompleted = size
		}
		if completed != float64(wantCompleted) {
			t.Errorf("%s: %s %s: claimd recorded %v completions, want %d", what, r.label, r.name, completed, wantCompleted)
		}
	}
}

// executionsPerWorkflow counts n8n's stored executions per workflow id.
func executionsPerWorkflow(t *testing.T, n *N8N) map[string]int {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	rows, err := conn.Query(ctx, `SELECT "workflowId", count(*) FROM execution_entity
		WHERE "deletedAt" IS NULL GROUP BY "workflowId"`)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var count int
		if err := rows.Scan(&id, &count); err != nil {
			t.Fatalf("reading n8n executions: %v", err)
		}
		out[id] = count
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	return out
}

// claimdScrape is what the test reads from claimd's /metrics.
type claimdScrape struct {
	// count and sum of claimd_http_request_duration_seconds of 2xx
	// answers, per call (overheadCall of the route).
	count, sum map[string]float64
	// outcomes is claimd_claims_total per outcome; completed the count of
	// claimd_claim_to_complete_seconds (one per completed claim).
	outcomes  map[string]float64
	completed float64
}

func scrapeClaimd(t *testing.T, c *Claimd) claimdScrape {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("claimd GET /metrics: status %d", status)
	}
	s := claimdScrape{count: map[string]float64{}, sum: map[string]float64{}, outcomes: map[string]float64{}}
	for _, line := range strings.Split(string(body), "\n") {
		name, labels, value, ok := parseMetricLine(line)
		if !ok {
			continue
		}
		switch name {
		case "claimd_http_request_duration_seconds_count":
			if call := overheadCall(labels["route"]); call != "" && labels["code"] == "2xx" {
				s.count[call] += value
			}
		case "claimd_http_request_duration_seconds_sum":
			if call := overheadCall(labels["route"]); call != "" && labels["code"] == "2xx" {
				s.sum[call] += value
			}
		case "claimd_claims_total":
			s.outcomes[labels["outcome"]] += value
		case "claimd_claim_to_complete_seconds_count":
			s.completed += value
		}
	}
	return s
}

// parseMetricLine splits one Prometheus text-format sample line
// (name{k="v",...} value); comments and blank lines give ok false.
func parseMetricLine(line string) (name string, labels map[string]string, value float64, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	var rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", nil, 0, false
		}
		name, rest = line[:i], line[j+1:]
		for _, kv := range strings.Split(line[i+1:j], ",") {
			k, v, found := strings.Cut(kv, "=")
			if found {
				labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	} else {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", nil, 0, false
		}
		name, rest = f[0], strings.Join(f[1:], " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Size()
}

// claimdLogLatencies reads claimd's request log lines (JSON, one per
// request: route and latency in ms) between offsets from and to, per call
// (overheadCall of the route; 2xx only). A log in another format gives an
// empty map (the report then uses /metrics).
func claimdLogLatencies(t *testing.T, path string, from, to int64) map[string][]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening claimd's log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		t.Fatalf("claimd's log: %v", err)
	}
	out := map[string][]float64{}
	sc := bufio.NewScanner(io.LimitReader(f, to-from))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var line struct {
			Route   string   `json:"route"`
			Status  int      `json:"status"`
			Latency *float64 `json:"latency_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Latency == nil || line.Status/100 != 2 {
			continue
		}
		if call := overheadCall(line.Route); call != "" {
			out[call] = append(out[call], *line.Latency)
		}
	}
	return out
}

func maxExecutionID(t *testing.T, n *N8N) int64 {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	var id int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM execution_entity`).Scan(&id); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	return id
}

// readOverheadExecutions reads n8n's stored executions after id first and
// records, per recipe and phase (by the measured phases' id ranges), their
// run time and every node's executionTime. An execution that did not
// succeed fails the test; executions outside the ranges (GET probes, none
// expected) are skipped.
func readOverheadExecutions(t *testing.T, n *N8N, first int64, recipes []*overheadRecipe, ranges []overheadRange) {
	t.Helper()
	byID := map[string]*overheadRecipe{}
	for _, r := range recipes {
		if r.n == n {
			byID[r.wfID] = r
		}
	}
	phaseOf := func(id int64) int {
		for _, rg := range ranges {
			if rg.n == n && id > rg.lo && id <= rg.hi {
				return rg.phase
			}
		}
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.DatabaseURL)
	if err != nil {
		t.Fatalf("connecting to n8n's database: %v", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT e.id, e."workflowId", e.status, e."startedAt", e."stoppedAt", d.data
		FROM execution_entity e JOIN execution_data d ON d."executionId" = e.id
		WHERE e.id > $1 ORDER BY e.id`, first)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var wfID, status, data string
		var started, stopped *time.Time
		if err := rows.Scan(&id, &wfID, &status, &started, &stopped, &data); err != nil {
			t.Fatalf("reading n8n executions: %v", err)
		}
		r, phase := byID[wfID], phaseOf(id)
		if r == nil || phase < 0 {
			continue
		}
		if status != "success" {
			t.Errorf("%s %s: execution %d ended %q", r.label, r.name, id, status)
		}
		times, err := nodeExecutionTimes(data)
		if err != nil {
			t.Fatalf("%s %s: execution %d data: %v", r.label, r.name, id, err)
		}
		for name, ms := range times {
			r.nodes[phase][name] = append(r.nodes[phase][name], ms)
		}
		if started != nil && stopped != nil {
			r.execTime[phase] = append(r.execTime[phase], float64(stopped.Sub(*started).Microseconds())/1000)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
}

// nodeExecutionTimes decodes n8n's stored execution data (the "flatted"
// format: a JSON array whose first element is the root object, every
// string inside an object or array being the index of its value in the
// array) and returns the summed executionTime (ms) of each node's runs.
func nodeExecutionTimes(data string) (map[string]float64, error) {
	var arr []any
	if err := json.Unmarshal([]byte(data), &arr); err != nil {
		return nil, err
	}
	deref := func(v any) any {
		s, ok := v.(string)
		if !ok {
			return v
		}
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(arr) {
			return nil
		}
		return arr[i]
	}
	if len(arr) == 0 {
		return nil, fmt.Errorf("empty execution data")
	}
	root, _ := arr[0].(map[string]any)
	result, _ := deref(root["resultData"]).(map[string]any)
	runData, _ := deref(result["runData"]).(map[string]any)
	if runData == nil {
		return nil, fmt.Errorf("no resultData.runData")
	}
	out := map[string]float64{}
	for name, ref := range runData {
		tasks, _ := deref(ref).([]any)
		for _, tr := range tasks {
			task, _ := deref(tr).(map[string]any)
			if ms, ok := task["executionTime"].(float64); ok {
				out[name] += ms
			}
		}
	}
	return out, nil
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// perRound is f of each round's latencies of r in phase.
func perRound(r *overheadRecipe, phase int, f func([]float64) float64) []float64 {
	out := make([]float64, len(r.lat[phase]))
	for i, xs := range r.lat[phase] {
		out[i] = f(xs)
	}
	return out
}

// roundDiffs is, per round, f of r's latencies minus f of base's in phase.
func roundDiffs(r, base *overheadRecipe, phase int, f func([]float64) float64) []float64 {
	a, b := perRound(r, phase, f), perRound(base, phase, f)
	out := make([]float64, 0, len(a))
	for i := range a {
		out = append(out, a[i]-b[i])
	}
	return out
}

func p50(xs []float64) float64 { return quantile(xs, .5) }
func p95(xs []float64) float64 { return quantile(xs, .95) }

// sideTime is claimd's own time for one delivery of r in phase: the sum
// of its calls' per-request medians from the log (the /metrics mean where
// the log gave nothing), with the calls named ("trigger 1.9 + complete 1.0").
func (r *overheadRecipe) sideTime(phase int) (float64, string) {
	calls := r.calls
	if phase == phaseDup {
		calls = calls[:1]
	}
	total, parts := 0.0, []string{}
	for _, call := range calls {
		v := p50(r.side[phase][call])
		if len(r.side[phase][call]) == 0 {
			v = 1000 * r.sideSum[phase][call] / math.Max(r.sideCount[phase][call], 1)
		}
		name := call
		if call == callComplete && r.hook {
			name = "complete (hook)"
		}
		total += v
		parts = append(parts, fmt.Sprintf("%s %.1f", name, v))
	}
	return total, strings.Join(parts, " + ")
}

// report formats the run's figures. Text columns are left-aligned,
// figures right-aligned (fixed-width cells).
func (o *overheadRun) report(t *testing.T, rounds int, started, measured, total time.Duration) string {
	t.Helper()
	cell := func(s string) string { return fmt.Sprintf("%7s", s) }
	ms := func(v float64) string {
		if math.IsNaN(v) {
			return cell("–")
		}
		return cell(fmt.Sprintf("%.1f", v))
	}
	signed := func(v float64) string {
		if math.IsNaN(v) {
			return cell("–")
		}
		return cell(fmt.Sprintf("%+.1f", v))
	}
	span := func(xs []float64) string {
		if len(xs) < 2 {
			return ""
		}
		return fmt.Sprintf("%+.1f … %+.1f", slices.Min(xs), slices.Max(xs))
	}
	// Medians of rounds: of a workflow's per-round quantile, and of a
	// recipe's per-round difference from another workflow.
	med := func(r *overheadRecipe, phase int, f func([]float64) float64) string {
		return ms(p50(perRound(r, phase, f)))
	}
	added := func(r, base *overheadRecipe, phase int, f func([]float64) float64) string {
		return signed(p50(roundDiffs(r, base, phase, f)))
	}
	var plainA, plainB, trig, trigHook, removeDupB *overheadRecipe
	for _, r := range o.recipes {
		switch {
		case r.kind == kindPlain && plainA == nil:
			plainA = r
		case r.kind == kindPlain:
			plainB = r
		case r.kind == kindRemoveDup && plainB != nil && r.base == plainB:
			removeDupB = r
		case r.kind == kindTrigger && !r.hook:
			trig = r
		case r.kind == kindTrigger:
			trigHook = r
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nCost per delivery of each deduplication recipe (make overhead)\n\n")
	fmt.Fprintf(&sb, "n8n %s, regular mode, Node.js %s; n8n's database PostgreSQL %s, pool size %s;\n",
		installedN8NVersion(t), nodeVersionOf(t), postgresVersion(t, plainA.n), n8nSetting(t, "DB_POSTGRESDB_POOL_SIZE", "2"))
	fmt.Fprintf(&sb, "expression engine %s", n8nSetting(t, "N8N_EXPRESSION_ENGINE", "vm"))
	if extra := os.Getenv("IC_OVERHEAD_N8N_ENV"); extra != "" {
		fmt.Fprintf(&sb, "; IC_OVERHEAD_N8N_ENV=%q", extra)
	}
	sb.WriteString(";\n")
	fmt.Fprintf(&sb, "node package %s %s; claimd on the same PostgreSQL server; %s\n",
		NodePackageName, nodePackageVersion(), machineInfo())
	sb.WriteString("Two n8n: A without the settle hook (1-4), B with it (1', 5). Every workflow answers When Last Node\n" +
		"Finishes (after n8n stored the execution and ran its hooks); a duplicate the trigger refuses is answered at once.\n")
	fmt.Fprintf(&sb, "%d rounds × %d events per workflow (after a warm-up round of %d), one request at a time, %s idle before\n",
		rounds, o.set.round, o.set.warmup, o.set.gap)
	sb.WriteString("each, the 6 workflows interleaved; each round: new event ids (won), then the same events again once\n" +
		"completed (duplicate). Latencies in ms, client side, medians of the rounds' p50 and p95.\n")
	fmt.Fprintf(&sb, "Run %s: start-up of 2 n8n and 3 claimd %s, rounds %s.\n\n",
		total.Round(time.Second), started.Round(time.Second), measured.Round(time.Second))

	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "latency\t%s\t%s\t%s\t%s\t%s\n", cell("won p50"), cell("p95"), cell("dup p50"), cell("p95"), "executions per dup")
	for _, r := range o.recipes {
		execs := "–"
		if r.sent[phaseDup] > 0 {
			execs = fmt.Sprintf("%.2f", float64(r.execs[phaseDup])/float64(r.sent[phaseDup]))
		}
		fmt.Fprintf(tw, "%s  %s: %s\t%s\t%s\t%s\t%s\t%s\n", r.label, r.name, r.shape,
			med(r, phaseWon, p50), med(r, phaseWon, p95), med(r, phaseDup, p50), med(r, phaseDup, p95), cell(execs))
	}
	tw.Flush()
	sb.WriteString("\n")

	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "added vs plain of the same n8n\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell("won p50"), cell("p95"), cell("dup p50"), cell("p95"),
		cell("claimd"), cell("claimd"), "won p50, rounds")
	fmt.Fprintf(tw, "\t\t\t\t\t%s\t%s\t\n", cell("won"), cell("dup"))
	for _, r := range o.recipes {
		if r.base == nil {
			continue
		}
		sideWon, sideDup := cell(""), cell("")
		if r.claimd != nil {
			w, _ := r.sideTime(phaseWon)
			d, _ := r.sideTime(phaseDup)
			sideWon, sideDup = ms(w), ms(d)
		}
		fmt.Fprintf(tw, "%s − %s  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.label, r.base.label, r.name,
			added(r, r.base, phaseWon, p50), added(r, r.base, phaseWon, p95),
			added(r, r.base, phaseDup, p50), added(r, r.base, phaseDup, p95),
			sideWon, sideDup, span(roundDiffs(r, r.base, phaseWon, p50)))
	}
	fmt.Fprintf(tw, "%s − %s  hook loaded, no claims\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", plainB.label, plainA.label,
		added(plainB, plainA, phaseWon, p50), added(plainB, plainA, phaseWon, p95),
		added(plainB, plainA, phaseDup, p50), added(plainB, plainA, phaseDup, p95),
		cell(""), cell(""), span(roundDiffs(plainB, plainA, phaseWon, p50)))
	// (5 − 1') − (4 − 1) per round: what the hook's settle adds to a won
	// delivery, each trigger against its own n8n's plain workflow.
	hookCost := func(f func([]float64) float64) []float64 {
		a, b := roundDiffs(trigHook, plainB, phaseWon, f), roundDiffs(trig, plainA, phaseWon, f)
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] - b[i]
		}
		return out
	}
	fmt.Fprintf(tw, "(%s − %s) − (%s − %s)  the hook's settle\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
		trigHook.label, plainB.label, trig.label, plainA.label,
		signed(p50(hookCost(p50))), signed(p50(hookCost(p95))), cell(""), cell(""), cell(""), cell(""), span(hookCost(p50)))
	if removeDupB != nil {
		// 5 − 2' per round: trigger + hook against Remove Duplicates in
		// the same n8n (negative: the trigger + hook is cheaper).
		fmt.Fprintf(tw, "%s − %s  trigger + hook vs Remove Duplicates, same n8n\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			trigHook.label, removeDupB.label,
			added(trigHook, removeDupB, phaseWon, p50), added(trigHook, removeDupB, phaseWon, p95),
			added(trigHook, removeDupB, phaseDup, p50), added(trigHook, removeDupB, phaseDup, p95),
			cell(""), cell(""), span(roundDiffs(trigHook, removeDupB, phaseWon, p50)))
	}
	tw.Flush()
	sb.WriteString("claimd won / dup: claimd's own time for the delivery's calls (its request log, p50 per call, summed).\n\n")

	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "inside n8n (stored executions, p50)\t%s\t%s\t%s\t%s\t%s\n", cell("won"), cell("Set"), "dedup nodes", cell("dup"), "dedup node")
	dedupNodes := func(r *overheadRecipe, phase int) string {
		var names []string
		switch r.kind {
		case kindRemoveDup:
			names = []string{"Remove Duplicates"}
		case kindClaim:
			names = []string{"Idempotent Claim", "Complete Claim"}
		case kindTrigger:
			if phase == phaseWon {
				return "(claimd called before the execution)"
			}
		}
		var parts []string
		for _, name := range names {
			if xs := r.nodes[phase][name]; len(xs) > 0 {
				parts = append(parts, fmt.Sprintf("%s %.1f", strings.TrimPrefix(name, "Idempotent "), p50(xs)))
			}
		}
		return strings.Join(parts, ", ")
	}
	for _, r := range o.recipes {
		dupExec := cell("none")
		if len(r.execTime[phaseDup]) > 0 {
			dupExec = ms(p50(r.execTime[phaseDup]))
		}
		fmt.Fprintf(tw, "%s  %s\t%s\t%s\t%s\t%s\t%s\n", r.label, r.name, ms(p50(r.execTime[phaseWon])),
			ms(p50(r.nodes[phaseWon]["Protected Step"])), dedupNodes(r, phaseWon), dupExec, dedupNodes(r, phaseDup))
	}
	tw.Flush()
	sb.WriteString("won / dup: the execution's stoppedAt − startedAt; node times: n8n's runData executionTime (whole ms).\n\n")

	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "claimd's own time per call, ms: request log p50 (/metrics mean)\twon\tduplicate")
	for _, r := range o.recipes {
		if r.claimd == nil {
			continue
		}
		var cells [2]string
		for phase := range 2 {
			_, named := r.sideTime(phase)
			var means []string
			calls := r.calls
			if phase == phaseDup {
				calls = calls[:1]
			}
			for _, call := range calls {
				means = append(means, fmt.Sprintf("%.1f", 1000*r.sideSum[phase][call]/math.Max(r.sideCount[phase][call], 1)))
			}
			cells[phase] = fmt.Sprintf("%s (%s)", named, strings.Join(means, " + "))
		}
		fmt.Fprintf(tw, "%s  %s\t%s\t%s\n", r.label, r.name, cells[phaseWon], cells[phaseDup])
	}
	tw.Flush()
	return sb.String()
}

// installedN8NVersion is the version in the installed n8n's package.json.
func installedN8NVersion(t *testing.T) string {
	in := FindN8N(t)
	var pj struct {
		Version string `json:"version"`
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(in.N8NBin)), "package.json"))
	if err != nil || json.Unmarshal(raw, &pj) != nil || pj.Version == "" {
		return n8nVersion
	}
	return pj.Version
}

func nodeVersionOf(t *testing.T) string {
	out, err := exec.Command(FindN8N(t).NodeBin, "--version").Output()
	if err != nil {
		return nodeVersion
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
}

func nodePackageVersion() string {
	var pj struct {
		Version string `json:"version"`
	}
	dir := nodePackageDir
	if v := os.Getenv("IC_OVERHEAD_NODE_DIR"); v != "" {
		dir = v
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil || json.Unmarshal(raw, &pj) != nil {
		return "?"
	}
	return pj.Version
}

// overheadN8NEnv parses IC_OVERHEAD_N8N_ENV ("K=V K2=V2") into settings
// for every n8n process.
func overheadN8NEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, kv := range strings.Fields(os.Getenv("IC_OVERHEAD_N8N_ENV")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			t.Fatalf("IC_OVERHEAD_N8N_ENV: %q is not K=V", kv)
		}
		env[k] = v
	}
	return env
}

// n8nSetting is an n8n setting as the run uses it: its IC_OVERHEAD_N8N_ENV
// value, else n8n's default (def) for this version.
func n8nSetting(t *testing.T, name, def string) string {
	if v, ok := overheadN8NEnv(t)[name]; ok {
		return v + " (" + name + ")"
	}
	return def + " (n8n's default)"
}

func postgresVersion(t *testing.T, n *N8N) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.DatabaseURL)
	if err != nil {
		return "?"
	}
	defer conn.Close(context.Background())
	var v string
	if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) != nil {
		return "?"
	}
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return v
}

// machineInfo names the CPU model and core count (Linux: /proc/cpuinfo).
func machineInfo() string {
	model := ""
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	s := fmt.Sprintf("%d cores", runtime.NumCPU())
	if model != "" {
		s += " (" + model + ")"
	}
	return s + ", " + runtime.GOOS + "/" + runtime.GOARCH
}
