package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

// The inline example's answers while the protected effect runs or hangs,
// with the node's safe defaults: an in-progress delivery is answered 409
// with a Retry-After of seconds, never 200 through Duplicate; a copy that
// arrives while the holder runs waits for it and answers with its result; a
// protected call that times out is failed as unknown, not retryable.

// exampleWait is the inline example's "Wait for a Concurrent Holder".
const exampleWait = 5 * time.Second

// shortEffectTimeout is the protected call's timeout in the inline
// example's copy of shortTimeoutCopy (the example's own is 30 s).
const shortEffectTimeout = 2 * time.Second

// shortTimeoutCopy writes a copy of the inline example (tag "to": webhook
// path inlinePath-to) whose Call Protected API times out after
// shortEffectTimeout, and returns its path.
func shortTimeoutCopy(t testing.TB, vars exampleVars) string {
	t.Helper()
	path := WriteExample(t, inlineExample, vars, "to")
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
		if node["name"] != "Call Protected API" {
			continue
		}
		opts := node["parameters"].(map[string]any)["options"].(map[string]any)
		opts["timeout"] = shortEffectTimeout.Milliseconds()
		found = true
	}
	if !found {
		t.Fatalf("%s has no node Call Protected API", inlineExample)
	}
	return WriteJSON(t, "inline-claim-short-timeout.json", wf)
}

// claimDeliveries returns the outcomes of the delivery log of claim id.
func claimDeliveries(t testing.TB, c *Claimd, id string) []string {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/v1/claims/"+id, nil)
	var rec struct {
		Deliveries []struct {
			Outcome string `json:"outcome"`
		} `json:"deliveries"`
	}
	if err := json.Unmarshal(body, &rec); status != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/claims/%s: status %d, %v, %.300s", id, status, err, body)
	}
	out := make([]string, len(rec.Deliveries))
	for i, d := range rec.Deliveries {
		out[i] = d.Outcome
	}
	return out
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// checkInProgressAnswers: the effect of a first delivery hangs (the Counter
// holds it). A second delivery of the event waits the example's 5 s for the
// holder, then is answered 409 in_progress with a Retry-After of a few
// seconds (the source's effects take milliseconds; the remaining lease
// would say ~300) and never 200. A third delivery waits too; the effect is
// let go meanwhile, and the third is answered 200 duplicate with the first
// one's result_ref. One effect.
func checkInProgressAnswers(t *testing.T, d *regularDeployment) {
	t.Helper()
	tg := inlineTarget(d)
	ev := newEvent(t, "hold")
	key := claimKey(d.claimd, ev)
	d.counter.Hold()
	released := false
	defer func() {
		if !released {
			d.counter.Release()
		}
	}()
	first := make(chan answer, 1)
	go func() { first <- tg.deliver(t, 0, ev) }()
	d.counter.WaitAttempts(t, key, 1, answerDeadline)

	start := time.Now()
	second := tg.deliver(t, 0, ev)
	took := time.Since(start)
	if second.Code != http.StatusConflict || second.Status != "in_progress" {
		t.Errorf("delivery while the holder's effect runs: %s, want 409 in_progress (never 200: the event is not done)", second)
	}
	if n, err := strconv.Atoi(second.RetryAfter); err != nil || n < 1 || n > 10 {
		t.Errorf("in_progress Retry-After %q: want a few seconds (how long this source's effects take), not the remaining lease", second.RetryAfter)
	}
	if took < exampleWait {
		t.Errorf("in_progress answered after %s, want after the example's wait of %s for the holder", took, exampleWait)
	}

	rec := lookupClaim(t, d.claimd, inlineSource, ev.ID)
	waiting := count(claimDeliveries(t, d.claimd, rec.ClaimID), "in_progress")
	third := make(chan answer, 1)
	go func() { third <- tg.deliver(t, 0, ev) }()
	// The third delivery's claim is in the log: it is waiting for the holder.
	deadline := time.Now().Add(answerDeadline)
	for count(claimDeliveries(t, d.claimd, rec.ClaimID), "in_progress") == waiting {
		if time.Now().After(deadline) {
			t.Fatalf("the third delivery never claimed")
		}
		time.Sleep(pollInterval)
	}
	d.counter.Release()
	released = true

	done, dup := <-first, <-third
	if done.Code != http.StatusOK || done.Status != "done" || done.ResultRef == "" {
		t.Fatalf("first delivery: %s (result_ref %q), want 200 done with a result_ref", done, done.ResultRef)
	}
	if dup.Code != http.StatusOK || dup.Status != "duplicate" || dup.ResultRef != done.ResultRef {
		t.Errorf("delivery that waited for the holder: %s (result_ref %q), want 200 duplicate with result_ref %q",
			dup, dup.ResultRef, done.ResultRef)
	}
	checkEffects(t, d.counter, "deliveries while the effect ran", 1, key)
}

// checkTimeoutIsUnknown: the protected call of the short-timeout copy times
// out (the Counter holds it past shortEffectTimeout). The effect may have
// happened, so the workflow fails the claim as unknown (an operator
// settles it), answers 500 with retry false, and a redelivery is answered
// from the claim (200 unknown) without a second call.
func checkTimeoutIsUnknown(t *testing.T, d *regularDeployment) {
	t.Helper()
	tg := target{n: d.n, paths: []string{inlinePath + "-to"}}
	ev := newEvent(t, "tmo")
	key := claimKey(d.claimd, ev)
	d.counter.Hold()
	a := tg.deliver(t, 0, ev)
	d.counter.Release()
	var body struct {
		Retry *bool `json:"retry"`
	}
	_ = json.Unmarshal(a.Raw, &body)
	if a.Code != http.StatusInternalServerError || a.Status != "failed" || body.Retry == nil || *body.Retry {
		t.Errorf("delivery whose protected call timed out: %s %s, want 500 failed with retry false", a, a.Raw)
	}
	if rec := lookupClaim(t, d.claimd, inlineSource, ev.ID); rec.State != "unknown" {
		t.Errorf("record after the timed-out call: state %s, want unknown (the effect may have happened)", rec.State)
	}
	if b := tg.deliver(t, 0, ev); b.Code != http.StatusOK || b.Status != "unknown" {
		t.Errorf("redelivery after the timeout: %s, want 200 unknown", b)
	}
	if got := d.counter.Attempts(key); got != 1 {
		t.Errorf("calls of the protected API: %d, want 1 (no automatic retry after an unknown outcome)", got)
	}
}
