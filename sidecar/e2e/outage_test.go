package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The sources of the outage test: one per lease policy. Claim-only sources
// (no provider): only their policies are configured.
const (
	reviewSource  = "outage-review"
	reclaimSource = "outage-reclaim"
)

// outagePath is the webhook of testdata/outage.json: a body of
// {"events": [{"id", "source", "lease"}, ...]} is split into one item per
// event, all claimed in one batch, each effect run (Counter) and all
// completed in one batch.
const outagePath = "outage-effect"

// outageLease and shortLease are the lease lengths of the two halves: one
// that outlasts a crash of the sidecar, one that does not.
const (
	outageLease = 60
	shortLease  = 6
)

// crashableClaimd is a one-replica sidecar the test can crash (SIGKILL of
// the process group it started, by PID) and start again on the same address
// and database.
type crashableClaimd struct {
	*Claimd
	env map[string]string
	// owner is the test that started the sidecar: a replica started again
	// (in a subtest) is stopped when the owner ends, not the subtest.
	owner testing.TB
}

func startCrashableClaimd(t *testing.T, env map[string]string) *crashableClaimd {
	t.Helper()
	return &crashableClaimd{Claimd: StartClaimd(t, ClaimdConfig{Env: env}), env: env, owner: t}
}

// crash kills the replica at once, as a crash would.
func (c *crashableClaimd) crash(t *testing.T) {
	t.Helper()
	c.Procs[0].Kill(t)
	t.Logf("claimd (pid %d) killed", c.Procs[0].PID())
}

// restart starts the replica again with StartClaimd's environment (same
// address, database, key and extra variables), logging to the same file,
// and waits until it is ready.
func (c *crashableClaimd) restart(t *testing.T) {
	t.Helper()
	old := c.Procs[0]
	env := EnvWithout([]string{"CLAIMD_", "DATABASE_URL"}, map[string]string{
		"DATABASE_URL":    c.DatabaseURL,
		"CLAIMD_ADDR":     strings.TrimPrefix(c.URL(), "http://"),
		"CLAIMD_API_KEYS": c.Tenant + ":" + c.APIKey,
	}, c.env)
	p := StartProc(c.owner, old.Name, filepath.Dir(old.LogPath), old.LogPath, env, ClaimdBinary(t), "serve")
	WaitHTTP(t, c.URL()+"/readyz", http.StatusOK, "", claimdReadyTimeout, p)
	c.Procs[0] = p
	t.Logf("claimd started again (pid %d)", p.PID())
}

// outageEvent is one event of a delivery to the outage workflow.
type outageEvent struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Lease  int    `json:"lease"`
}

// outageDeliveries makes deliveries×perDelivery fresh events of source with
// the given lease, grouped by delivery.
func outageDeliveries(t *testing.T, prefix, source string, lease, deliveries, perDelivery int) [][]outageEvent {
	t.Helper()
	out := make([][]outageEvent, deliveries)
	for d := range out {
		for e := 0; e < perDelivery; e++ {
			out[d] = append(out[d], outageEvent{ID: fmt.Sprintf("%s_%d_%d_%s", prefix, d, e, RandomHex(t, 4)),
				Source: source, Lease: lease})
		}
	}
	return out
}

// outageRun is one storm of the outage test: its deliveries, the effect
// keys of its events, and the answers once they arrive.
type outageRun struct {
	deliveries [][]outageEvent
	keys       []string
	answers    []answer
	wg         sync.WaitGroup
}

// deliverHeld delivers every delivery at once while the Counter holds
// effects, and returns once each event's effect has arrived (held): every
// claim is won and every effect is running.
func deliverHeld(t *testing.T, n *N8N, c *crashableClaimd, counter *Counter, deliveries [][]outageEvent) *outageRun {
	t.Helper()
	r := &outageRun{deliveries: deliveries, answers: make([]answer, len(deliveries))}
	for _, d := range deliveries {
		for _, ev := range d {
			r.keys = append(r.keys, claim.IdempotencyKey(c.Tenant, claim.Key{Source: ev.Source, EventID: ev.ID}))
		}
	}
	counter.Hold()
	for i, d := range deliveries {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.answers[i] = deliver(t, n, outagePath, map[string]any{"events": d}, nil)
		}()
	}
	for _, k := range r.keys {
		counter.WaitAttempts(t, k, 1, answerDeadline)
	}
	return r
}

// wait returns the answers once every delivery is answered.
func (r *outageRun) wait() []answer {
	r.wg.Wait()
	return r.answers
}

// redeliver sends every delivery of r again, one after the other.
func (r *outageRun) redeliver(t *testing.T, n *N8N) []answer {
	t.Helper()
	out := make([]answer, len(r.deliveries))
	for i, d := range r.deliveries {
		out[i] = deliver(t, n, outagePath, map[string]any{"events": d}, nil)
	}
	return out
}

// records looks up the claim record of every event of r.
func (r *outageRun) records(t *testing.T, c *Claimd) []claimRecord {
	t.Helper()
	var out []claimRecord
	for _, d := range r.deliveries {
		for _, ev := range d {
			out = append(out, lookupClaim(t, c, ev.Source, ev.ID))
		}
	}
	return out
}

// waitStates polls until every event of r has a record in state want.
func (r *outageRun) waitStates(t *testing.T, c *Claimd, want string, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		var off []string
		for _, rec := range r.records(t, c) {
			if rec.State != want {
				off = append(off, rec.ClaimID+"="+rec.State)
			}
		}
		if len(off) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("records not %s within %s: %v", want, deadline, off)
		}
		time.Sleep(pollInterval)
	}
}

// notWonOutcomes is the "outcomes" of a Respond Not Won answer.
func notWonOutcomes(t *testing.T, a answer) []string {
	t.Helper()
	var body struct {
		Outcomes []string `json:"outcomes"`
	}
	if err := json.Unmarshal(a.Raw, &body); err != nil {
		t.Errorf("answer %s: %v", a, err)
	}
	return body.Outcomes
}

// failedExecutionData returns the stored data of the workflow's executions
// that ended in error (n8n's own database).
func failedExecutionData(t *testing.T, n *N8N, workflowID string) []string {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	rows, err := conn.Query(ctx, `SELECT d.data FROM execution_data d
		JOIN execution_entity e ON e.id = d."executionId"
		WHERE e."workflowId" = $1 AND e.status = 'error'`, workflowID)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	return out
}

// TestSidecarOutageBetweenEffectAndComplete crashes the sidecar (SIGKILL)
// while the protected effects run, in a real n8n (regular mode), and checks
// that Complete, sent once per execution for all its items, keeps trying
// until the claims' lease end.
//
//   - Back within 10 s: every record completed, exactly one effect per
//     event, no failed execution, and redeliveries are duplicates.
//   - Down longer than the lease, lease policy review: the executions fail
//     with "the outcome is now unknown", the records become unknown, and
//     redeliveries run no second effect.
//   - Down longer than the lease, lease policy reclaim: as documented, the
//     next delivery wins the claim again and runs the effect a second time.
func TestSidecarOutageBetweenEffectAndComplete(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sources, []byte(fmt.Sprintf("sources:\n  %s:\n    lease_policy: review\n  %s:\n    lease_policy: reclaim\n",
		reviewSource, reclaimSource)), 0o600); err != nil {
		t.Fatalf("writing sources file: %v", err)
	}
	c := startCrashableClaimd(t, map[string]string{
		"CLAIMD_SOURCES_FILE": sources,
		// The lease sweep (review → unknown) runs every second.
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "1",
	})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
	})
	wf := WriteWorkflow(t, "testdata/outage.json", map[string]string{
		"COUNTER_URL": counter.URL, "CREDENTIAL_ID": claimCredID,
	})
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}, Credentials: []string{creds}, NodePackage: nodePackageDir})
	workflowID := n.WorkflowIDs[0]

	t.Run("back within 10 s: every record completed, one effect each", func(t *testing.T) {
		r := deliverHeld(t, n, c, counter, outageDeliveries(t, "back", reviewSource, outageLease, 4, 3))
		c.crash(t)
		down := time.Now()
		counter.Release() // the effects finish while the sidecar is down
		time.Sleep(3 * time.Second)
		c.restart(t)
		if d := time.Since(down); d > 10*time.Second {
			t.Errorf("sidecar was down %s, want at most 10 s", d)
		}
		for i, a := range r.wait() {
			if a.Code != http.StatusOK || a.Status != "done" {
				t.Errorf("delivery %d: %s, want 200 done", i, a)
			}
		}
		checkEffects(t, counter, "one effect per event across the crash", 1, r.keys...)
		for _, rec := range r.records(t, c.Claimd) {
			if rec.State != "completed" || !strings.HasPrefix(rec.ResultRef, "eff-") || rec.Attempt != 1 {
				t.Errorf("record %s: state %s, attempt %d, result_ref %q; want completed at attempt 1 with the effect's id",
					rec.ClaimID, rec.State, rec.Attempt, rec.ResultRef)
			}
		}
		st := n.WaitExecutionsSettled(t, workflowID, 2*time.Minute)
		if st["error"]+st["crashed"]+st["canceled"] != 0 {
			t.Errorf("executions by status %v, want none failed", st)
		}
		for i, a := range r.redeliver(t, n) {
			if a.Code != http.StatusOK || a.Status != "duplicate" {
				t.Errorf("redelivery %d: %s, want 200 duplicate", i, a)
			}
		}
		checkEffects(t, counter, "after redelivery", 1, r.keys...)
	})

	t.Run("down past the lease under review: unknown, no second effect", func(t *testing.T) {
		r := deliverHeld(t, n, c, counter, outageDeliveries(t, "review", reviewSource, shortLease, 2, 2))
		c.crash(t)
		counter.Release()
		// Complete keeps trying until the lease end, then fails the
		// execution; the sidecar stays down past it.
		for i, a := range r.wait() {
			if a.Code != http.StatusInternalServerError {
				t.Errorf("delivery %d: %s, want 500 (the execution failed)", i, a)
			}
		}
		c.restart(t)
		r.waitStates(t, c.Claimd, "unknown", time.Minute)
		for i, a := range r.redeliver(t, n) {
			outcomes := notWonOutcomes(t, a)
			if a.Code != http.StatusOK || a.Status != "duplicate" || len(outcomes) != 2 ||
				outcomes[0] != "unknown" || outcomes[1] != "unknown" {
				t.Errorf("redelivery %d: %s %v, want 200 duplicate with outcomes unknown", i, a, outcomes)
			}
		}
		checkEffects(t, counter, "review: no second effect", 1, r.keys...)
		st := n.WaitExecutionsSettled(t, workflowID, 2*time.Minute)
		if st["error"] != len(r.deliveries) {
			t.Errorf("executions by status %v, want %d in error", st, len(r.deliveries))
		}
		for _, data := range failedExecutionData(t, n, workflowID) {
			if !strings.Contains(data, "The effect ran but its outcome could not be recorded") ||
				!strings.Contains(data, "the outcome is now unknown") {
				t.Errorf("a failed execution does not carry the unknown-outcome error: %.400s", data)
			}
		}
	})

	t.Run("down past the lease under reclaim: the next delivery runs the effect again", func(t *testing.T) {
		before := n.ExecutionStatuses(t, workflowID)["error"]
		r := deliverHeld(t, n, c, counter, outageDeliveries(t, "reclaim", reclaimSource, shortLease, 1, 2))
		c.crash(t)
		counter.Release()
		for i, a := range r.wait() {
			if a.Code != http.StatusInternalServerError {
				t.Errorf("delivery %d: %s, want 500 (the execution failed)", i, a)
			}
		}
		c.restart(t)
		for _, rec := range r.records(t, c.Claimd) {
			if rec.State != "processing" {
				t.Errorf("record %s: %s, want processing (expired lease, reclaimable)", rec.ClaimID, rec.State)
			}
		}
		for i, a := range r.redeliver(t, n) {
			if a.Code != http.StatusOK || a.Status != "done" {
				t.Errorf("redelivery %d: %s, want 200 done (reclaimed)", i, a)
			}
		}
		checkEffects(t, counter, "reclaim: the effect runs again", 2, r.keys...)
		for _, rec := range r.records(t, c.Claimd) {
			if rec.State != "completed" || rec.Attempt != 2 {
				t.Errorf("record %s: %s at attempt %d, want completed at attempt 2", rec.ClaimID, rec.State, rec.Attempt)
			}
		}
		st := n.WaitExecutionsSettled(t, workflowID, 2*time.Minute)
		if st["error"]-before != len(r.deliveries) {
			t.Errorf("executions by status %v, want %d more in error", st, len(r.deliveries))
		}
	})
}
