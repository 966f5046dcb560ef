package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// crashDeadline bounds the wait for a killed worker's claim to be settled:
// n8n notices the stalled job only once its lock (QUEUE_WORKER_LOCK_DURATION,
// 60 s) has run out and a stalled-job check (every 30 s) has seen it.
const crashDeadline = 6 * time.Minute

// The settle hook's side of the trigger: what happens to a won claim when
// its execution ends (success, error, claimd down, worker gone).

// checkHookCompletes: one delivery → one execution; the hook completes the
// claim with a result_ref naming that execution; a redelivery is answered
// duplicate by the trigger and starts no execution.
func checkHookCompletes(t *testing.T, d *triggerDeployment) {
	ev := newStripeEvent(t, "hook")
	before := executionIDs(t, d.n, d.wf)
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 won" {
		t.Fatalf("delivery: %s, want 200 won", outcome(a))
	}
	rec := waitClaimStates(t, d.claimd.Claimd, []stripeEvent{ev}, "completed", settleDeadline)[0]
	d.n.WaitExecutionsSettled(t, d.wf, settleDeadline)
	exec := executionOf(t, d.n, d.wf, ev.ID)
	added := newIDs(executionIDs(t, d.n, d.wf), before)
	if len(added) != 1 || !added[exec] {
		t.Errorf("new executions %v, want exactly the event's (%q)", added, exec)
	}
	if status := executionStatus(t, d.n, exec); status != "success" {
		t.Errorf("execution %s: status %q, want success", exec, status)
	}
	if !namesExecution(rec.ResultRef, exec) || rec.Attempt != 1 {
		t.Errorf("record: result_ref %q, attempt %d; want it to name execution %s, attempt 1", rec.ResultRef, rec.Attempt, exec)
	}
	t.Logf("completed by the hook: result_ref %q", rec.ResultRef)
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 duplicate" {
		t.Errorf("redelivery: %s, want 200 duplicate", outcome(a))
	}
	checkNoNewExecution(t, d, d.wf, before, exec)
	checkEffects(t, d.counter, "won once, redelivered once", 1, d.key(ev))
}

// checkFailAfterEffect: in the example's copy a node after the protected
// call throws. The effect ran, so the hook fails the claim as unknown (not
// retryable): a redelivery is answered by the trigger (2xx, outcome
// unknown) and runs neither an execution nor a second effect.
func checkFailAfterEffect(t *testing.T, d *triggerDeployment) {
	ev := newStripeEvent(t, "failafter")
	before := executionIDs(t, d.n, d.failing)
	if a := d.deliver(t, 0, d.failingPath, ev, d.secret); outcome(a) != "200 won" {
		t.Fatalf("delivery: %s, want 200 won", outcome(a))
	}
	rec := waitClaimStates(t, d.claimd.Claimd, []stripeEvent{ev}, "unknown", settleDeadline)[0]
	t.Logf("record after the failed execution: state %s, last_error %q", rec.State, rec.LastError)
	d.n.WaitExecutionsSettled(t, d.failing, settleDeadline)
	exec := executionOf(t, d.n, d.failing, ev.ID)
	if status := executionStatus(t, d.n, exec); status != "error" {
		t.Errorf("execution %s: status %q, want error", exec, status)
	}
	checkEffects(t, d.counter, "the execution failed after its effect", 1, d.key(ev))
	for i := 0; i < 2; i++ {
		if a := d.deliver(t, i, d.failingPath, ev, d.secret); outcome(a) != "200 unknown" {
			t.Errorf("redelivery %d: %s, want 200 unknown (an operator settles it)", i+1, outcome(a))
		}
	}
	checkNoNewExecution(t, d, d.failing, before, exec)
	checkEffects(t, d.counter, "redelivered after the failure", 1, d.key(ev))
	if rec := waitClaimStates(t, d.claimd.Claimd, []stripeEvent{ev}, "unknown", settleDeadline)[0]; rec.Attempt != 1 {
		t.Errorf("record after the redeliveries: attempt %d, want 1", rec.Attempt)
	}
}

// checkClaimdDownAtSettle: claimd is killed after the trigger claimed and
// while the protected call is held (its effect done), so the execution ends
// with claimd down and the hook's call cannot land; once claimd is back on
// the same address and database, the hook's retry completes the claim.
func checkClaimdDownAtSettle(t *testing.T, d *triggerDeployment) {
	ev := newStripeEvent(t, "down")
	key := d.key(ev)
	d.counter.HoldAnswers()
	defer d.counter.Release()
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 won" {
		t.Fatalf("delivery: %s, want 200 won", outcome(a))
	}
	d.counter.WaitEffects(t, key, 1, answerDeadline)
	refusedBefore := countInLogs(t, d.n, hookNotTaken)
	d.claimd.crash(t)
	down := time.Now()
	d.counter.Release()

	// The execution ends while claimd is down: the hook must not hold it.
	exec := waitExecutionEnded(t, d.n, d.wf, ev.ID, settleDeadline)
	t.Logf("execution %s ended %s after claimd went down", exec, time.Since(down).Round(time.Millisecond))
	// The hook's call found claimd down (it logs that once per outage).
	waitInLogs(t, d.n, hookNotTaken, refusedBefore+1, settleDeadline)
	d.claimd.restart(t)
	back := time.Now()
	rec := waitClaimStates(t, d.claimd.Claimd, []stripeEvent{ev}, "completed", settleDeadline)[0]
	t.Logf("claimd down %s; claim completed %s after it came back", back.Sub(down).Round(time.Millisecond),
		time.Since(back).Round(time.Millisecond))
	if status := executionStatus(t, d.n, exec); status != "success" {
		t.Errorf("execution %s: status %q, want success", exec, status)
	}
	if !namesExecution(rec.ResultRef, exec) || rec.Attempt != 1 {
		t.Errorf("record: result_ref %q, attempt %d; want it to name execution %s, attempt 1", rec.ResultRef, rec.Attempt, exec)
	}
	checkEffects(t, d.counter, "claimd down while the hook settled", 1, key)
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 duplicate" {
		t.Errorf("redelivery: %s, want 200 duplicate", outcome(a))
	}
	checkEffects(t, d.counter, "redelivered after the settle", 1, key)
}

// checkWorkerCrash (queue mode): the worker running the execution is killed
// (SIGKILL of the process group the harness started, by PID) after the
// effect and before the execution ends. n8n notices the stalled job in the
// process that enqueued it, and the hook fails the claim as unknown: one
// effect, and a redelivery starts nothing. The time from the kill to the
// settled claim is logged (a figure for
// n8n-node/README.md#settle-hook-self-hosted-n8n), not asserted.
func checkWorkerCrash(t *testing.T, d *triggerDeployment) {
	ev := newStripeEvent(t, "crash")
	key := d.key(ev)
	before := executionIDs(t, d.n, d.wf)
	d.counter.HoldAnswers()
	defer d.counter.Release()
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 won" {
		t.Fatalf("delivery: %s, want 200 won", outcome(a))
	}
	d.counter.WaitEffects(t, key, 1, answerDeadline)
	exec := executionOf(t, d.n, d.wf, ev.ID)
	worker := workerRunning(t, d.n, exec, answerDeadline)
	pid := worker.PID()
	worker.Kill(t)
	killed := time.Now()
	t.Logf("killed %s (pid %d), which ran execution %s", worker.Name, pid, exec)
	d.counter.Release()

	rec := waitClaimStates(t, d.claimd.Claimd, []stripeEvent{ev}, "unknown", crashDeadline)[0]
	t.Logf("FIGURE: worker SIGKILL → claim unknown in %s (last_error %q)", time.Since(killed).Round(100*time.Millisecond), rec.LastError)
	// Not waited for: n8n's own recovery of a crashed queue execution is
	// not what is under test.
	t.Logf("execution %s: status %q in n8n's database", exec, executionStatus(t, d.n, exec))
	checkEffects(t, d.counter, "worker killed after the effect", 1, key)
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 unknown" {
		t.Errorf("redelivery: %s, want 200 unknown", outcome(a))
	}
	// An execution is stored before it is queued, so one the redelivery
	// had started would be there once the trigger answered.
	for id := range newIDs(executionIDs(t, d.n, d.wf), before) {
		if id != exec {
			t.Errorf("the redelivery started execution %s; the trigger must answer it without one", id)
		}
	}
	checkEffects(t, d.counter, "redelivered after the crash", 1, key)
}

// workerRunning returns the worker whose log says it started execution
// exec ("Worker started execution <id> (job <n>)"), polling until deadline.
func workerRunning(t testing.TB, n *N8N, exec string, deadline time.Duration) *Proc {
	t.Helper()
	if exec == "" {
		t.Fatalf("no execution holds the event")
	}
	needle := "Worker started execution " + exec + " "
	end := time.Now().Add(deadline)
	for {
		for _, w := range n.Workers {
			if raw, err := os.ReadFile(w.LogPath); err == nil && strings.Contains(string(raw), needle) {
				return w
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no worker log says %q within %s", needle, deadline)
		}
		time.Sleep(pollInterval)
	}
}

// hookNotTaken is what the settle hook logs when claimd does not take a
// settle (its first failure of an outage); the settle is retried.
const hookNotTaken = "Idempotent Claim hook: claimd did not take a settle"

// countInLogs counts the lines holding needle in the logs of every n8n
// process (main, workers, webhook processes).
func countInLogs(t testing.TB, n *N8N, needle string) int {
	t.Helper()
	paths := map[string]bool{n.Main.LogPath: true}
	for _, p := range append(append([]*Proc{}, n.Workers...), n.WebhookProcs...) {
		paths[p.LogPath] = true
	}
	count := 0
	for path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		count += strings.Count(string(raw), needle)
	}
	return count
}

// waitInLogs polls until the n8n logs hold needle at least want times.
func waitInLogs(t testing.TB, n *N8N, needle string, want int, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for countInLogs(t, n, needle) < want {
		if time.Now().After(end) {
			t.Fatalf("the n8n logs do not say %q (%d times) within %s", needle, want, deadline)
		}
		time.Sleep(pollInterval)
	}
}

// waitExecutionEnded polls until the workflow's execution holding eventID
// exists and is neither new nor running, and returns its id.
func waitExecutionEnded(t testing.TB, n *N8N, workflowID, eventID string, deadline time.Duration) string {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		exec := executionOf(t, n, workflowID, eventID)
		if exec != "" {
			if st := executionStatus(t, n, exec); st != "new" && st != "running" {
				return exec
			}
		}
		if time.Now().After(end) {
			t.Fatalf("the execution of %s did not end within %s (execution %q); does the hook hold it while claimd is down?",
				eventID, deadline, exec)
		}
		time.Sleep(pollInterval)
	}
}

// executionStatus is the status of execution id in n8n's database ("" when
// there is no such execution).
func executionStatus(t testing.TB, n *N8N, id string) string {
	t.Helper()
	if id == "" {
		return ""
	}
	ctx, conn, done := n.openDB(t)
	defer done()
	var status string
	if err := conn.QueryRow(ctx, `SELECT status FROM execution_entity WHERE id::text = $1`, id).Scan(&status); err != nil {
		t.Fatalf("reading execution %s: %v", id, err)
	}
	return status
}

// checkNoNewExecution waits until the workflow's executions are settled and
// checks that none was added since before other than want ("" for none).
func checkNoNewExecution(t testing.TB, d *triggerDeployment, workflowID string, before map[string]bool, want string) {
	t.Helper()
	d.n.WaitExecutionsSettled(t, workflowID, settleDeadline)
	for id := range newIDs(executionIDs(t, d.n, workflowID), before) {
		if id != want {
			t.Errorf("a redelivery started execution %s; the trigger must answer it without one", id)
		}
	}
}

// settleGate is a reverse proxy between the settle hook and claimd. It
// passes every request through, except while held: then a request (other
// than the hook's workflow-version reports) waits until Open, and one whose caller went away meanwhile (its n8n process
// exited) is dropped unsent, as a request cut by the exit would be.
type settleGate struct {
	URL     string
	mu      sync.Mutex
	hold    chan struct{}
	arrived chan string
}

func newSettleGate(t testing.TB, upstream string) *settleGate {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("settle gate: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	g := &settleGate{arrived: make(chan string, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		hold := g.hold
		g.mu.Unlock()
		// The hook's workflow-version reports (sent next to the settles)
		// are no settle: never held, so the settle is what Arrived sees.
		if r.URL.Path == "/v1/executions/workflow" {
			hold = nil
		}
		if hold != nil {
			select {
			case g.arrived <- r.URL.Path:
			default:
			}
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if r.Context().Err() != nil {
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		g.Open()
		srv.Close()
	})
	g.URL = srv.URL
	return g
}

// Hold makes requests arriving from now on wait until Open.
func (g *settleGate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hold == nil {
		g.hold = make(chan struct{})
	}
}

// Open lets held requests through and stops holding new ones.
func (g *settleGate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hold != nil {
		close(g.hold)
		g.hold = nil
	}
}

// Arrived returns the path of the next request held, or fails the test
// after deadline.
func (g *settleGate) Arrived(t testing.TB, deadline time.Duration) string {
	t.Helper()
	select {
	case path := <-g.arrived:
		return path
	case <-time.After(deadline):
		t.Fatalf("no settle reached claimd's gate within %s", deadline)
		return ""
	}
}

// hookStopping is what the settle hook logs when n8n stops with settles
// still on their way to claimd.
const hookStopping = "Idempotent Claim hook: n8n is stopping; sending the settles of"

// checkStopWaitsForSettle (regular mode): the hook sends a settle after the
// execution ended, without holding it. n8n is stopped (SIGTERM) while that
// settle is held on its way to claimd: n8n's stop must wait for it, so the
// claim is completed when n8n has exited. Were n8n to exit first, the held
// request would be dropped with its connection and the claim left processing.
// n8n is started again afterwards.
func checkStopWaitsForSettle(t *testing.T, d *triggerDeployment) {
	ev := newStripeEvent(t, "stop")
	d.gate.Hold()
	defer d.gate.Open()
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 won" {
		t.Fatalf("delivery: %s, want 200 won", outcome(a))
	}
	if path := d.gate.Arrived(t, settleDeadline); path != "/v1/claims/complete/batch" {
		t.Fatalf("held request: %s, want the hook's complete", path)
	}
	exec := waitExecutionEnded(t, d.n, d.wf, ev.ID, settleDeadline)
	if rec, ok := findClaim(t, d.claimd.Claimd, triggerSource, ev.ID); !ok || rec.State != "processing" {
		t.Fatalf("before the stop: claim %+v (found %v), want processing", rec, ok)
	}
	stopping := countInLogs(t, d.n, hookStopping)
	main := d.n.Main
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		main.Stop(t)
	}()
	// The hook says it waits; only then is the settle let through.
	waitInLogs(t, d.n, hookStopping, stopping+1, settleDeadline)
	if exited, _ := main.Exited(); exited {
		t.Fatalf("n8n exited before the held settle reached claimd")
	}
	d.gate.Open()
	<-stopped
	if _, err := main.Exited(); err != nil {
		t.Errorf("n8n's exit after SIGTERM: %v, want a clean exit", err)
	}
	rec, ok := findClaim(t, d.claimd.Claimd, triggerSource, ev.ID)
	if !ok || rec.State != "completed" || !namesExecution(rec.ResultRef, exec) {
		t.Fatalf("after n8n exited: claim %+v (found %v), want completed naming execution %s", rec, ok, exec)
	}
	d.n.RestartMain(t, false)
	if a := d.deliver(t, 0, d.path, ev, d.secret); outcome(a) != "200 duplicate" {
		t.Errorf("redelivery after the restart: %s, want 200 duplicate", outcome(a))
	}
	checkEffects(t, d.counter, "n8n stopped while the settle was held", 1, d.key(ev))
}
