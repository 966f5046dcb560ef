package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Storm sizes. The storms are numbered as the subtests of
// TestExampleWorkflowsRegularMode (1–5, 7); storm 6 is
// TestExampleWorkflowsQueueMode.
const (
	stormCopies  = 20 // storms 1 and 2: one event delivered 20 times
	storm7Events = 10 // storm 7: 10 distinct events …
	storm7Copies = 5  // … × 5 copies, 50 deliveries at once
)

// fastBackoff makes a retryable failure claimable again within about a
// second (full jitter over at most 1 s for the first retry, cap 2 s), so the
// provider's redelivery in the downstream-failure test wins promptly.
var fastBackoff = map[string]string{
	"CLAIMD_BACKOFF_BASE_SECONDS": "1",
	"CLAIMD_BACKOFF_CAP_SECONDS":  "2",
}

// Credential ids the tests import; the example workflows reference them
// through their __CREDENTIAL_ID__ / __HOOK_CREDENTIAL_ID__ /
// __OPERATOR_CREDENTIAL_ID__ placeholders.
const (
	claimCredID    = "icE2eClaimCred01"
	claimCredIDB   = "icE2eClaimCred02"
	hookCredID     = "icE2eHookCred001"
	operatorCredID = "icE2eOperCred001"
)

// operatorHeader is the header the reconciliation example's webhook
// requires (Header Auth), as the e2e operator credential names it.
const operatorHeader = "X-Operator-Token"

// ingestSourceName is the standard-webhooks source of the durable-path test.
const ingestSourceName = "e2e-std"

// formsSourceName is the token source keyed by body fields (form name and
// submission number) of the non-ASCII identity test; formsToken is its
// shared secret.
const (
	formsSourceName = "e2e-forms"
	formsToken      = "e2e-forms-token-0123456789"
)

// regularDeployment is one sidecar and one regular-mode n8n running the
// inline, durable-dispatch and reconciliation examples against one Counter.
type regularDeployment struct {
	n       *N8N
	claimd  *Claimd
	counter *Counter
	// inline and durable are the imported workflows' ids.
	inline, durable string
	// ingestSecret signs deliveries to POST /ingest/ingestSourceName.
	ingestSecret string
	// operatorToken is the reconciliation webhook's Header Auth value.
	operatorToken string
	// shortTimeout is the id of the inline example's copy whose protected
	// call times out after shortEffectTimeout (path inlinePath-to).
	shortTimeout string
}

// startRegularDeployment starts the sidecar first (its sources file forwards
// the standard-webhooks source to the durable example's webhook on the port
// n8n will use), then n8n with the three examples imported and published.
func startRegularDeployment(t *testing.T) *regularDeployment {
	t.Helper()
	d := &regularDeployment{counter: NewCounter(t), operatorToken: RandomHex(t, 24)}
	port := FreePort(t)
	hookToken := RandomHex(t, 24)
	d.ingestSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte(RandomHex(t, 16)))

	// StartClaimd configures tenant "e2e" (checked below); the source's
	// events must land in that tenant's ledger to be claimed by n8n.
	sources := fmt.Sprintf(`sources:
  %s:
    tenant: e2e
    provider: standard-webhooks
    secrets: [%q]
    forward:
      url: "http://127.0.0.1:%d/webhook/%s"
      headers: {Authorization: %q}
      timeout_seconds: 60
      max_attempts: 20
      backoff_base_seconds: 1
      backoff_cap_seconds: 2
  %s:
    tenant: e2e
    provider: token
    secrets: [%q]
    options: {header: X-Forms-Token, key: {id_pointers: ["/form", "/submission"]}}
    forward:
      url: "http://127.0.0.1:%d/webhook/%s"
      headers: {Authorization: %q}
      timeout_seconds: 60
      max_attempts: 20
      backoff_base_seconds: 1
      backoff_cap_seconds: 2
`, ingestSourceName, d.ingestSecret, port, durablePath, "Bearer "+hookToken,
		formsSourceName, formsToken, port, durablePath, "Bearer "+hookToken)
	sourcesFile := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sourcesFile, []byte(sources), 0o600); err != nil {
		t.Fatalf("writing sources file: %v", err)
	}
	env := map[string]string{"CLAIMD_SOURCES_FILE": sourcesFile}
	for k, v := range fastBackoff {
		env[k] = v
	}
	d.claimd = StartClaimd(t, ClaimdConfig{Env: env})
	if d.claimd.Tenant != "e2e" {
		t.Fatalf("StartClaimd's tenant is %q; the sources file above names e2e", d.claimd.Tenant)
	}

	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", d.claimd.URL(), d.claimd.APIKey),
		{ID: hookCredID, Name: "Sidecar dispatch token (e2e)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": "Authorization", "value": "Bearer " + hookToken}},
		{ID: operatorCredID, Name: "Reconciliation operator token (e2e)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": operatorHeader, "value": d.operatorToken}},
	})
	vars := exampleVars{"EFFECT_URL": d.counter.URL + "/effect", "CREDENTIAL_ID": claimCredID,
		"HOOK_CREDENTIAL_ID": hookCredID, "OPERATOR_CREDENTIAL_ID": operatorCredID}
	d.n = StartN8N(t, N8NConfig{
		Workflows: []string{
			WriteExample(t, inlineExample, vars, ""),
			WriteExample(t, durableExample, vars, ""),
			WriteExample(t, reconciliationExample, vars, ""),
			shortTimeoutCopy(t, vars),
		},
		Credentials: []string{creds},
		NodePackage: nodePackageDir,
		Port:        port,
	})
	d.inline, d.durable, d.shortTimeout = d.n.WorkflowIDs[0], d.n.WorkflowIDs[1], d.n.WorkflowIDs[3]
	return d
}

// TestExampleWorkflowsRegularMode drives the example workflows in one
// regular-mode n8n with one sidecar: storms 1–5 and 7 (the numbered
// subtests) through the inline example, the durable path (signed deliveries
// to the sidecar's ingest, dispatched to the durable example) and the
// reconciliation example. Every count is exact.
func TestExampleWorkflowsRegularMode(t *testing.T) {
	t.Parallel()
	d := startRegularDeployment(t)
	tg := inlineTarget(d)

	t.Run("1 sequential duplicates", func(t *testing.T) {
		ev := newEvent(t, "seq")
		answers := sequentialStorm(t, tg, ev, stormCopies)
		checkSequentialAnswers(t, answers)
		checkEffects(t, d.counter, "one event delivered 20 times in sequence", 1, claimKey(d.claimd, ev))
	})

	t.Run("2 concurrent duplicates", func(t *testing.T) {
		ev := newEvent(t, "conc")
		answers := parallelStorm(t, tg, []event{ev}, stormCopies)[ev.ID]
		t.Logf("answers: %v", tally(answers))
		checkClaimAnswers(t, "one event delivered 20 times at once", answers)
		checkEffects(t, d.counter, "one event delivered 20 times at once", 1, claimKey(d.claimd, ev))
		if a := tg.deliver(t, 0, ev); a.Code != http.StatusOK || a.Status != "duplicate" {
			t.Errorf("delivery after the storm: %s, want 200 duplicate", a)
		}
	})

	t.Run("claims carry a request id", func(t *testing.T) {
		// The node sends "execution:node name:run index:item index" (case
		// B19), read from the real engine ($thisRunIndex), so a retry of
		// the same claim gets its claim back.
		ev := newEvent(t, "rid")
		tg.deliver(t, 0, ev)
		rec := lookupClaim(t, d.claimd, inlineSource, ev.ID)
		status, body := d.claimd.Do(t, 0, http.MethodGet, "/v1/claims/"+rec.ClaimID, nil)
		var full struct {
			Deliveries []struct {
				ExecutionID string `json:"execution_id"`
				Detail      string `json:"detail"`
			} `json:"deliveries"`
		}
		if err := json.Unmarshal(body, &full); status != http.StatusOK || err != nil || len(full.Deliveries) == 0 {
			t.Fatalf("GET claim: status %d, %v, %.300s", status, err, body)
		}
		first := full.Deliveries[0]
		if want := "request_id=" + first.ExecutionID + ":"; first.ExecutionID == "" ||
			!strings.HasPrefix(first.Detail, want) || !strings.HasSuffix(first.Detail, ":0:0") {
			t.Errorf("first claim's log entry: %+v, want detail %s<node name>:0:0", first, want)
		}
	})

	t.Run("3 new event id", func(t *testing.T) {
		first, second := newEvent(t, "new"), newEvent(t, "new")
		for _, ev := range []event{first, second, first, second} {
			tg.deliver(t, 0, ev)
		}
		checkEffects(t, d.counter, "two event ids, each delivered twice", 1, claimKey(d.claimd, first), claimKey(d.claimd, second))
	})

	t.Run("4 changed payload is a conflict", func(t *testing.T) {
		ev := newEvent(t, "conf")
		if a := tg.deliver(t, 0, ev); a.Code != http.StatusOK || a.Status != "done" {
			t.Fatalf("first delivery: %s, want 200 done", a)
		}
		changed := ev
		changed.Amount++
		for i := 0; i < 3; i++ {
			if a := tg.deliver(t, 0, changed); a.Code != http.StatusOK || a.Status != "conflict" {
				t.Errorf("delivery %d with a changed payload: %s, want 200 conflict", i+1, a)
			}
		}
		key := claimKey(d.claimd, ev)
		checkEffects(t, d.counter, "same id, changed payload", 1, key)
		if got := d.counter.Attempts(key); got != 1 {
			t.Errorf("effect requests for %s: %d, want 1 (the conflicting deliveries must not reach the effect)", key, got)
		}
	})

	t.Run("5 downstream failure then redelivery", func(t *testing.T) {
		checkFailThenRedelivery(t, d.claimd, d.counter, tg)
	})

	t.Run("in progress is answered 409 with a short Retry-After, never 200", func(t *testing.T) {
		checkInProgressAnswers(t, d)
	})

	t.Run("a timed-out effect is failed as unknown", func(t *testing.T) {
		checkTimeoutIsUnknown(t, d)
	})

	t.Run("7 ten events five copies in parallel", func(t *testing.T) {
		checkStorm7(t, d.claimd, d.counter, tg)
	})

	t.Run("durable ingest dispatch", func(t *testing.T) {
		checkDurableIngest(t, d)
	})

	t.Run("durable ingest non-ASCII event id", func(t *testing.T) {
		checkNonASCIIIdentity(t, d)
	})

	t.Run("reconciliation", func(t *testing.T) {
		checkReconciliation(t, d)
	})

	checkNoFailedExecutions(t, d.n, d.inline)
	checkNoFailedExecutions(t, d.n, d.durable)
	checkNoFailedExecutions(t, d.n, d.shortTimeout)
}

// TestExampleWorkflowsQueueMode is storm 6: storms 1, 2 and 7 with n8n in
// queue mode (main plus two workers on Redis) and two sidecar replicas on one
// database. Two copies of the inline example, each with its own credential
// pointing at a different replica, take the deliveries in turn, so the
// claims of every event are decided by both replicas.
func TestExampleWorkflowsQueueMode(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	c := StartClaimd(t, ClaimdConfig{Replicas: 2, Env: fastBackoff})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (replica 0)", c.URLs[0], c.APIKey),
		claimCredential(claimCredIDB, "Idempotent Claim API (replica 1)", c.URLs[1], c.APIKey),
	})
	wfA := WriteExample(t, inlineExample, exampleVars{"EFFECT_URL": counter.URL + "/effect", "CREDENTIAL_ID": claimCredID}, "a")
	wfB := WriteExample(t, inlineExample, exampleVars{"EFFECT_URL": counter.URL + "/effect", "CREDENTIAL_ID": claimCredIDB}, "b")
	n := StartN8N(t, N8NConfig{
		Workflows: []string{wfA, wfB}, Credentials: []string{creds}, NodePackage: nodePackageDir,
		Queue: true, Workers: 2, WorkerConcurrency: 10,
	})
	tg := target{n: n, paths: []string{inlinePath + "-a", inlinePath + "-b"}}

	t.Run("1 sequential duplicates", func(t *testing.T) {
		ev := newEvent(t, "qseq")
		checkSequentialAnswers(t, sequentialStorm(t, tg, ev, stormCopies))
		checkEffects(t, counter, "queue mode: one event delivered 20 times in sequence", 1, claimKey(c, ev))
	})

	t.Run("2 concurrent duplicates", func(t *testing.T) {
		ev := newEvent(t, "qconc")
		answers := parallelStorm(t, tg, []event{ev}, stormCopies)[ev.ID]
		t.Logf("answers: %v", tally(answers))
		checkClaimAnswers(t, "queue mode: one event delivered 20 times at once", answers)
		checkEffects(t, counter, "queue mode: one event delivered 20 times at once", 1, claimKey(c, ev))
	})

	t.Run("7 ten events five copies in parallel", func(t *testing.T) {
		checkStorm7(t, c, counter, tg)
	})

	served := []int{claimsServed(t, c, 0), claimsServed(t, c, 1)}
	t.Logf("claims decided per sidecar replica: %v", served)
	for i, s := range served {
		if s == 0 {
			t.Errorf("sidecar replica %d decided no claim; the deliveries were meant to be spread over both", i)
		}
	}
	for _, id := range n.WorkflowIDs {
		checkNoFailedExecutions(t, n, id)
	}
}

// checkSequentialAnswers checks storm 1's answers: the first delivery wins
// and answers "done" once the effect is complete; each later one, sent after
// that answer, takes the Duplicate branch and gets the same result_ref.
func checkSequentialAnswers(t *testing.T, answers []answer) {
	t.Helper()
	if a := answers[0]; a.Code != http.StatusOK || a.Status != "done" || a.ResultRef == "" {
		t.Fatalf("first delivery: %s (result_ref %q), want 200 done with a result_ref", a, a.ResultRef)
	}
	dups := 0
	for i, a := range answers[1:] {
		if a.Code == http.StatusOK && a.Status == "duplicate" && a.ResultRef == answers[0].ResultRef {
			dups++
			continue
		}
		t.Errorf("delivery %d: %s (result_ref %q), want 200 duplicate with result_ref %q", i+2, a, a.ResultRef, answers[0].ResultRef)
	}
	if dups != len(answers)-1 {
		t.Errorf("%d of %d redeliveries answered duplicate, want all", dups, len(answers)-1)
	}
}

// checkStorm7 is storm 7: 10 distinct events × 5 copies, all 50 at once →
// exactly one effect per event, 10 in all.
func checkStorm7(t *testing.T, c *Claimd, counter *Counter, tg target) {
	t.Helper()
	events := make([]event, storm7Events)
	keys := make([]string, len(events))
	for i := range events {
		events[i] = newEvent(t, fmt.Sprintf("s7e%02d", i))
		keys[i] = claimKey(c, events[i])
	}
	before := counter.Total()
	byEvent := parallelStorm(t, tg, events, storm7Copies)
	var all []answer
	for _, ev := range events {
		checkClaimAnswers(t, "event "+ev.ID, byEvent[ev.ID])
		all = append(all, byEvent[ev.ID]...)
	}
	t.Logf("answers: %v", tally(all))
	checkEffects(t, counter, "10 events × 5 copies at once", 1, keys...)
	if got := counter.Total() - before; got != storm7Events {
		t.Errorf("effects during the storm: %d, want %d", got, storm7Events)
	}
}

// checkFailThenRedelivery is test 5: the effect fails once; the workflow
// fails the claim as retryable and answers 500; the provider redelivers
// (honouring Retry-After while the backoff runs) until the answer is neither
// 503 nor 409, and that redelivery wins and performs the one effect.
func checkFailThenRedelivery(t *testing.T, c *Claimd, counter *Counter, tg target) {
	t.Helper()
	ev := newEvent(t, "fail")
	key := claimKey(c, ev)
	counter.FailNext(key, 1)
	if a := tg.deliver(t, 0, ev); a.Code != http.StatusInternalServerError || a.Status != "failed" {
		t.Fatalf("delivery whose effect fails: %s, want 500 failed", a)
	}
	if rec := lookupClaim(t, c, inlineSource, ev.ID); rec.State != "retryable_failed" || rec.Attempt != 1 {
		t.Fatalf("record after the failed effect: state %s, attempt %d; want retryable_failed, 1", rec.State, rec.Attempt)
	}
	if got := counter.Count(key); got != 0 {
		t.Fatalf("effects after the failed attempt: %d, want 0", got)
	}

	// The provider's redelivery loop. Waiting out Retry-After is the
	// provider's behaviour under test, not synchronisation.
	deadline := time.Now().Add(2 * time.Minute)
	var waits []answer
	var last answer
	for {
		last = tg.deliver(t, 0, ev)
		if last.Code != http.StatusServiceUnavailable && last.Code != http.StatusConflict {
			break
		}
		waits = append(waits, last)
		if time.Now().After(deadline) {
			t.Fatalf("redeliveries still answered %s after 2 minutes (answers: %v)", last, tally(waits))
		}
		wait := 100 * time.Millisecond // a provider's floor between attempts
		if s, err := strconv.Atoi(last.RetryAfter); err == nil && time.Duration(s)*time.Second > wait {
			wait = time.Duration(s) * time.Second
		} else if err != nil {
			t.Errorf("answer %s without a whole-seconds Retry-After (%q)", last, last.RetryAfter)
		}
		time.Sleep(wait)
	}
	t.Logf("redeliveries answered %v before the one that won", tally(waits))
	for _, a := range waits {
		if a.Code != http.StatusServiceUnavailable || a.Status != "retry_later" {
			t.Errorf("redelivery during the backoff: %s, want 503 retry_later", a)
		}
	}
	if last.Code != http.StatusOK || last.Status != "done" {
		t.Fatalf("redelivery after the backoff: %s, want 200 done", last)
	}
	checkEffects(t, counter, "failed once, then redelivered", 1, key)
	if got := counter.Attempts(key); got != 2 {
		t.Errorf("effect requests: %d, want 2 (the failed one and the one that won)", got)
	}
	if rec := lookupClaim(t, c, inlineSource, ev.ID); rec.State != "completed" || rec.Attempt != 2 {
		t.Errorf("record after the redelivery: state %s, attempt %d; want completed, 2", rec.State, rec.Attempt)
	}
	if a := tg.deliver(t, 0, ev); a.Code != http.StatusOK || a.Status != "duplicate" {
		t.Errorf("delivery after completion: %s, want 200 duplicate", a)
	}
}

// ingestReceipt is the sidecar's answer to POST /ingest/{source}.
type ingestReceipt struct {
	Received []struct {
		EventID string `json:"event_id"`
		ClaimID string `json:"claim_id"`
	} `json:"received"`
}

// inboxEvent is the part of GET /v1/inbox/{id} the durable test reads.
type inboxEvent struct {
	ClaimState       string `json:"claim_state"`
	DispatchState    string `json:"dispatch_state"`
	DispatchAttempts int    `json:"dispatch_attempts"`
}

// checkDurableIngest is the durable path: one signed Standard Webhooks
// delivery sent 20 times at once to the sidecar's ingest → 20 2xx, one inbox
// record, dispatched to the durable example, exactly one effect.
func checkDurableIngest(t *testing.T, d *regularDeployment) {
	t.Helper()
	ev := newEvent(t, "dur")
	body, err := json.Marshal(ev.body())
	if err != nil {
		t.Fatal(err)
	}
	msgID := "msg_" + RandomHex(t, 8)
	ts := time.Now().Unix()
	sig, err := verifytest.StandardWebhooks(d.ingestSecret, msgID, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"webhook-id": msgID, "webhook-timestamp": strconv.FormatInt(ts, 10), "webhook-signature": sig}
	url := d.claimd.URL() + "/ingest/" + ingestSourceName
	answers := make([]answer, stormCopies)
	Parallel(len(answers), func(i int) { answers[i] = post(t, url, body, headers) })

	claimIDs := map[string]bool{}
	eventID := ""
	for i, a := range answers {
		if a.Code < 200 || a.Code > 299 {
			t.Errorf("ingest delivery %d: %s, want 2xx", i, a)
			continue
		}
		var rc ingestReceipt
		if err := json.Unmarshal(a.Raw, &rc); err != nil || len(rc.Received) != 1 {
			t.Errorf("ingest delivery %d: receipt %.300s (%v), want one received event", i, a.Raw, err)
			continue
		}
		claimIDs[rc.Received[0].ClaimID] = true
		eventID = rc.Received[0].EventID
	}
	if len(claimIDs) != 1 || t.Failed() {
		t.Fatalf("the 20 deliveries map to inbox records %v, want exactly one", claimIDs)
	}
	var claimID string
	for id := range claimIDs {
		claimID = id
	}

	// The dispatcher posts the stored event to n8n until it answers 2xx.
	var in inboxEvent
	deadline := time.Now().Add(3 * time.Minute)
	for {
		status, raw := d.claimd.Do(t, 0, http.MethodGet, "/v1/inbox/"+claimID, nil)
		if status != http.StatusOK {
			t.Fatalf("GET /v1/inbox/%s: status %d, body %.300s", claimID, status, raw)
		}
		if err := json.Unmarshal(raw, &in); err != nil {
			t.Fatalf("GET /v1/inbox/%s: %v", claimID, err)
		}
		if in.DispatchState != "pending" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox event still pending after 3 minutes: %+v", in)
		}
		time.Sleep(pollInterval)
	}
	if in.DispatchState != "dispatched" || in.ClaimState != "completed" {
		t.Errorf("inbox event after dispatch: %+v, want dispatched and completed", in)
	}
	t.Logf("inbox event dispatched after %d attempt(s)", in.DispatchAttempts)
	key := claim.IdempotencyKey(d.claimd.Tenant, claim.Key{Source: ingestSourceName, EventID: eventID})
	checkEffects(t, d.counter, "one signed delivery sent 20 times to the ingest", 1, key)
}

// checkNonASCIIIdentity is case B11 (an event id keeps its bytes through
// every hop) in a real n8n: events keyed by a form name with 2-, 3- and
// 4-byte UTF-8 and a newline are ingested, dispatched to the durable
// example, claimed by the workflow from the X-Idempotency-* headers as n8n
// reads them, and completed: the inbox record itself is the one claimed
// (dispatched on the first claim, completed), no second record exists, one
// effect each.
func checkNonASCIIIdentity(t *testing.T, d *regularDeployment) {
	t.Helper()
	run := RandomHex(t, 4)
	for _, form := range []string{"Anmeldung Frühjahr " + run, "Preis € " + run, "Party 🎉 " + run, "two\nlines " + run} {
		body, err := json.Marshal(map[string]any{"form": form, "submission": 1, "data": map[string]any{"x": 1}})
		if err != nil {
			t.Fatal(err)
		}
		a := post(t, d.claimd.URL()+"/ingest/"+formsSourceName, body, map[string]string{"X-Forms-Token": formsToken})
		var rc ingestReceipt
		if a.Code != http.StatusOK || json.Unmarshal(a.Raw, &rc) != nil || len(rc.Received) != 1 {
			t.Fatalf("ingest %q: %s, want 200 with one receipt", form, a)
		}
		claimID, eventID := rc.Received[0].ClaimID, rc.Received[0].EventID
		var in inboxEvent
		deadline := time.Now().Add(3 * time.Minute)
		for {
			status, raw := d.claimd.Do(t, 0, http.MethodGet, "/v1/inbox/"+claimID, nil)
			if status != http.StatusOK || json.Unmarshal(raw, &in) != nil {
				t.Fatalf("GET /v1/inbox/%s: status %d, body %.300s", claimID, status, raw)
			}
			if in.DispatchState != "pending" || time.Now().After(deadline) {
				break
			}
			time.Sleep(pollInterval)
		}
		if in.DispatchState != "dispatched" || in.ClaimState != "completed" {
			t.Errorf("%q: inbox event %+v, want dispatched and completed (the workflow claimed this record)", form, in)
		}
		rec := lookupClaim(t, d.claimd, formsSourceName, eventID)
		if rec.ClaimID != claimID {
			t.Errorf("%q: the record of key %q is %s, want the inbox record %s", form, eventID, rec.ClaimID, claimID)
		}
		key := claim.IdempotencyKey(d.claimd.Tenant, claim.Key{Source: formsSourceName, EventID: eventID})
		checkEffects(t, d.counter, "non-ASCII id "+strconv.Quote(form), 1, key)
	}
	status, raw := d.claimd.Do(t, 0, http.MethodGet, "/v1/claims/list?state=processing&source="+formsSourceName, nil)
	if status != http.StatusOK || strings.Contains(string(raw), run) {
		t.Errorf("a second record of a non-ASCII id is open: %d %.500s", status, raw)
	}
}

// checkReconciliation drives the reconciliation example: a claim whose
// attempt ended with an unknown outcome (made and failed through the API)
// answers deliveries "unknown" without an effect; resolved as "retry"
// through the example, the next delivery wins and performs the one effect;
// a second resolution of the now completed claim is refused.
func checkReconciliation(t *testing.T, d *regularDeployment) {
	t.Helper()
	ev := newEvent(t, "rec")
	status, raw := d.claimd.Do(t, 0, http.MethodPost, "/v1/claims", map[string]any{"source": inlineSource, "event_id": ev.ID})
	var won struct {
		Outcome    string `json:"outcome"`
		ClaimID    string `json:"claim_id"`
		ClaimToken string `json:"claim_token"`
	}
	if err := json.Unmarshal(raw, &won); status != http.StatusOK || err != nil || won.Outcome != "won" {
		t.Fatalf("claim: status %d, body %.300s (%v), want won", status, raw, err)
	}
	status, raw = d.claimd.Do(t, 0, http.MethodPost, "/v1/claims/"+won.ClaimID+"/fail",
		map[string]any{"claim_token": won.ClaimToken, "error": "timeout: outcome unknown", "retry": "unknown"})
	if status != http.StatusOK {
		t.Fatalf("fail unknown: status %d, body %.300s", status, raw)
	}
	if a := inlineTarget(d).deliver(t, 0, ev); a.Code != http.StatusOK || a.Status != "unknown" {
		t.Errorf("delivery while the claim is unknown: %s, want 200 unknown (Duplicate branch)", a)
	}

	resolve := map[string]any{"source": inlineSource, "event_id": ev.ID, "resolution": "retry", "note": "e2e: the effect did not happen"}
	// The operator webhook settles claims: without the operator's header,
	// or with a wrong one, n8n refuses the request and nothing changes.
	for _, headers := range []map[string]string{nil, {operatorHeader: "not-the-token"}} {
		if a := deliver(t, d.n, reconciliationPath, resolve, headers); a.Code != http.StatusForbidden && a.Code != http.StatusUnauthorized {
			t.Errorf("reconciliation with headers %v: %s, want 401 or 403", headers, a)
		}
	}
	if rec := lookupClaim(t, d.claimd, inlineSource, ev.ID); rec.State != "unknown" {
		t.Fatalf("record after unauthenticated reconciliation attempts: state %s, want unknown (untouched)", rec.State)
	}
	operator := map[string]string{operatorHeader: d.operatorToken}
	if a := deliver(t, d.n, reconciliationPath, resolve, operator); a.Code != http.StatusOK || a.Status != "resolved" {
		t.Fatalf("reconciliation: %s, want 200 resolved", a)
	}
	if rec := lookupClaim(t, d.claimd, inlineSource, ev.ID); rec.State != "retryable_failed" {
		t.Fatalf("record after resolve retry: state %s, want retryable_failed", rec.State)
	}
	if a := inlineTarget(d).deliver(t, 0, ev); a.Code != http.StatusOK || a.Status != "done" {
		t.Errorf("delivery after the resolution: %s, want 200 done", a)
	}
	checkEffects(t, d.counter, "resolved as retry, then delivered", 1, claimKey(d.claimd, ev))
	if a := deliver(t, d.n, reconciliationPath, resolve, operator); a.Code != http.StatusConflict || a.Status != "not_resolvable" {
		t.Errorf("second reconciliation of a completed claim: %s, want 409 not_resolvable", a)
	}
}

// inlineTarget is the inline example's webhook in d.
func inlineTarget(d *regularDeployment) target { return target{n: d.n, paths: []string{inlinePath}} }
