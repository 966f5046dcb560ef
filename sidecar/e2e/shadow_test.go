package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Shadow mode through a real n8n: the trigger example on a Stripe trigger
// source with shadow: true. Every copy of every event starts an execution
// and runs the protected effect, as without the layer, while claimd
// records what it would have decided: the would-be duplicates it reports
// (claimd_shadow_decisions_total and the maintenance loop's hourly
// rollup) are exactly the copies, and the hook completes each event's one
// claim that would have won.

// Shadow storm sizes: small, so the test takes a few minutes at most.
const (
	shadowEvents = 4
	shadowCopies = 3
)

func TestShadowTriggerStorm(t *testing.T) {
	counter := NewCounter(t)
	secret := "whsec_" + RandomHex(t, 24)
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sources, []byte(fmt.Sprintf(`sources:
  %s:
    tenant: e2e
    provider: stripe
    secrets: [%q]
    shadow: true
`, triggerSource, secret)), 0o600); err != nil {
		t.Fatalf("writing sources file: %v", err)
	}
	c := StartClaimd(t, ClaimdConfig{Env: map[string]string{
		"CLAIMD_SOURCES_FILE":                 sources,
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "1",
	}})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
	})
	wf := WriteExample(t, triggerExample, exampleVars{"EFFECT_URL": counter.URL + "/effect", "CREDENTIAL_ID": claimCredID}, "")
	n := StartN8N(t, N8NConfig{
		Workflows:   []string{wf},
		Credentials: []string{creds},
		NodePackage: nodePackageDir,
		HookFiles:   []string{settleHookFile},
		Env: map[string]string{
			"IDEMPOTENT_CLAIM_URL":     c.URL(),
			"IDEMPOTENT_CLAIM_API_KEY": c.APIKey,
		},
	})
	d := &triggerDeployment{n: n, claimd: &crashableClaimd{Claimd: c}, counter: counter, secret: secret,
		wf: n.WorkflowIDs[0], path: triggerPath(t, wf)}

	events := make([]stripeEvent, shadowEvents)
	keys := make([]string, len(events))
	for i := range events {
		events[i] = newStripeEvent(t, fmt.Sprintf("shadow%02d", i))
		keys[i] = d.key(events[i])
	}
	before := executionIDs(t, n, d.wf)
	answers := make([]answer, shadowEvents*shadowCopies)
	Parallel(len(answers), func(i int) {
		answers[i] = d.deliver(t, i, d.path, events[i%shadowEvents], secret)
	})
	var all []string
	for i, a := range answers {
		all = append(all, outcome(a))
		if o := outcomes(a); a.Code != http.StatusOK || len(o) != 1 || o[0] != "won" {
			t.Errorf("copy %d of %s: %s, want 200 won (shadow: every copy proceeds)", i/shadowEvents, events[i%shadowEvents].ID, outcome(a))
		}
	}
	t.Logf("answers: %v", tallyStrings(all))

	// Every copy ran, as without the layer; the hook completed each
	// event's one claim that would have won (a copy holds no token).
	waitClaimStates(t, c, events, "completed", settleDeadline)
	st := n.WaitExecutionsSettled(t, d.wf, settleDeadline)
	if added := newIDs(executionIDs(t, n, d.wf), before); len(added) != shadowEvents*shadowCopies {
		t.Errorf("executions: %d new (by status now %v), want %d (every copy of every event)", len(added), st,
			shadowEvents*shadowCopies)
	}
	checkEffects(t, counter, "shadow: every copy runs its effect", shadowCopies, keys...)

	want := (shadowCopies - 1) * shadowEvents
	if got := shadowMetric(t, c, "duplicate") + shadowMetric(t, c, "in_progress"); got != want {
		t.Errorf("claimd_shadow_decisions_total{would_be=duplicate|in_progress} = %d, want %d (the copies)", got, want)
	}
	if got := shadowMetric(t, c, "won"); got != shadowEvents {
		t.Errorf("claimd_shadow_decisions_total{would_be=won} = %d, want %d", got, shadowEvents)
	}
	if got := metricSum(t, c, "claimd_duplicates_total"); got != 0 {
		t.Errorf("claimd_duplicates_total = %d, want 0: nothing was stopped", got)
	}

	// The maintenance loop's rollup reports the same would-be duplicates.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, c.DatabaseURL)
	if err != nil {
		t.Fatalf("connecting to claimd's database: %v", err)
	}
	defer db.Close(context.Background())
	for {
		var would, stopped, deliveries int64
		if err := db.QueryRow(ctx, `SELECT COALESCE(sum(would_duplicates), 0)::bigint,
			COALESCE(sum(duplicates_stopped), 0)::bigint, COALESCE(sum(deliveries), 0)::bigint
			FROM stats_hourly WHERE tenant = $1 AND source = $2`, c.Tenant, triggerSource).Scan(&would, &stopped, &deliveries); err != nil {
			t.Fatalf("reading stats_hourly: %v", err)
		}
		if would == int64(want) && deliveries == int64(shadowEvents*shadowCopies) {
			if stopped != 0 {
				t.Errorf("stats_hourly duplicates_stopped %d, want 0", stopped)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the rollup has %d would-be duplicates of %d deliveries, want %d of %d", would, deliveries, want,
				shadowEvents*shadowCopies)
		case <-time.After(pollInterval):
		}
	}
}

// shadowMetric is claimd_shadow_decisions_total summed over sources for
// one would_be.
func shadowMetric(t testing.TB, c *Claimd, wouldBe string) int {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "claimd_shadow_decisions_total{") || !strings.Contains(line, `would_be="`+wouldBe+`"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += int(v)
	}
	return total
}
