package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
)

// compareRow is one line of the comparison table: the effects one storm
// produced through each workflow.
type compareRow struct {
	storm, mode string
	// ideal is the number of distinct events (one effect each).
	ideal int
	// claimEffects and baselineEffects are the effects performed through the
	// inline claim example and the Remove Duplicates baseline.
	claimEffects, baselineEffects int
	// baselineAnswers tallies the baseline's answers to its deliveries;
	// baselineErrors counts those that were not 2xx (failed executions).
	baselineAnswers map[string]int
	baselineErrors  int
}

// compareSide is one workflow under comparison in one n8n.
type compareSide struct {
	tg      target
	counter *Counter
	// key is the Counter key of an event's effect.
	key func(event) string
}

// runCompareStorm sends the same storm (copies of each of n fresh events,
// all at once) through both sides, the claim side first, and returns the
// row. The claim side must be exact: one effect per event.
func runCompareStorm(t *testing.T, storm, mode string, claimSide, baseSide compareSide, events, copies int) compareRow {
	t.Helper()
	row := compareRow{storm: storm, mode: mode, ideal: events}
	count := func(side compareSide, prefix string) (int, map[string][]answer, []string) {
		evs := make([]event, events)
		keys := make([]string, events)
		for i := range evs {
			evs[i] = newEvent(t, fmt.Sprintf("%s%02d", prefix, i))
			keys[i] = side.key(evs[i])
		}
		answers := parallelStorm(t, side.tg, evs, copies)
		total := 0
		for _, k := range keys {
			total += side.counter.Count(k)
		}
		return total, answers, keys
	}
	var claimAnswers map[string][]answer
	var claimKeys []string
	row.claimEffects, claimAnswers, claimKeys = count(claimSide, "cmpc")
	checkEffects(t, claimSide.counter, storm+" ("+mode+"), Idempotent Claim", 1, claimKeys...)
	for id, as := range claimAnswers {
		checkClaimAnswers(t, "event "+id, as)
	}
	var baseAnswers map[string][]answer
	row.baselineEffects, baseAnswers, _ = count(baseSide, "cmpb")
	row.baselineAnswers = map[string]int{}
	for _, as := range baseAnswers {
		for k, v := range tally(as) {
			row.baselineAnswers[k] += v
		}
		for _, a := range as {
			if a.Code < 200 || a.Code > 299 {
				row.baselineErrors++
			}
		}
	}
	t.Logf("%s (%s): Idempotent Claim %d effects, Remove Duplicates %d effects (its answers: %v)",
		storm, mode, row.claimEffects, row.baselineEffects, row.baselineAnswers)
	return row
}

// TestCompareRemoveDuplicates is `make compare` (runs only with
// IC_COMPARE=1): storms 2, 7 and 6 (queue mode) through the inline claim
// example and through the otherwise identical workflow built on n8n's Remove
// Duplicates node ("Remove Items Processed in Previous Executions"), printing
// the effect counts side by side. Only the claim side is asserted; the
// baseline's numbers are what they are.
func TestCompareRemoveDuplicates(t *testing.T) {
	if os.Getenv("IC_COMPARE") != "1" {
		t.Skip("IC_COMPARE=1 runs the Remove Duplicates comparison (make compare)")
	}
	var rows []compareRow

	t.Run("regular", func(t *testing.T) {
		claimCounter, baseCounter := NewCounter(t), NewCounter(t)
		c := StartClaimd(t, ClaimdConfig{})
		creds := WriteJSON(t, "credentials.json", []credential{
			claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
		})
		n := StartN8N(t, N8NConfig{
			Workflows: []string{
				WriteExample(t, inlineExample, exampleVars{"EFFECT_URL": claimCounter.URL + "/effect", "CREDENTIAL_ID": claimCredID}, ""),
				WriteExample(t, baselineExample, exampleVars{"EFFECT_URL": baseCounter.URL + "/effect"}, ""),
			},
			Credentials: []string{creds}, NodePackage: nodePackageDir,
		})
		claimSide := compareSide{tg: target{n: n, paths: []string{inlinePath}}, counter: claimCounter,
			key: func(ev event) string { return claimKey(c, ev) }}
		baseSide := compareSide{tg: target{n: n, paths: []string{baselinePath}}, counter: baseCounter,
			key: func(ev event) string { return ev.ID }}
		rows = append(rows,
			runCompareStorm(t, "2: 1 event × 20 at once", "regular", claimSide, baseSide, 1, stormCopies),
			runCompareStorm(t, "7: 10 events × 5 copies, 50 at once", "regular", claimSide, baseSide, storm7Events, storm7Copies))
	})

	t.Run("queue", func(t *testing.T) {
		claimCounter, baseCounter := NewCounter(t), NewCounter(t)
		c := StartClaimd(t, ClaimdConfig{Replicas: 2})
		creds := WriteJSON(t, "credentials.json", []credential{
			claimCredential(claimCredID, "Idempotent Claim API (replica 0)", c.URLs[0], c.APIKey),
			claimCredential(claimCredIDB, "Idempotent Claim API (replica 1)", c.URLs[1], c.APIKey),
		})
		n := StartN8N(t, N8NConfig{
			Workflows: []string{
				WriteExample(t, inlineExample, exampleVars{"EFFECT_URL": claimCounter.URL + "/effect", "CREDENTIAL_ID": claimCredID}, "a"),
				WriteExample(t, inlineExample, exampleVars{"EFFECT_URL": claimCounter.URL + "/effect", "CREDENTIAL_ID": claimCredIDB}, "b"),
				WriteExample(t, baselineExample, exampleVars{"EFFECT_URL": baseCounter.URL + "/effect"}, ""),
			},
			Credentials: []string{creds}, NodePackage: nodePackageDir,
			Queue: true, Workers: 2, WorkerConcurrency: 10,
		})
		claimSide := compareSide{tg: target{n: n, paths: []string{inlinePath + "-a", inlinePath + "-b"}}, counter: claimCounter,
			key: func(ev event) string { return claimKey(c, ev) }}
		baseSide := compareSide{tg: target{n: n, paths: []string{baselinePath}}, counter: baseCounter,
			key: func(ev event) string { return ev.ID }}
		rows = append(rows,
			runCompareStorm(t, "6: storm 2 in queue mode", "queue, 2 workers, 2 sidecars", claimSide, baseSide, 1, stormCopies),
			runCompareStorm(t, "6: storm 7 in queue mode", "queue, 2 workers, 2 sidecars", claimSide, baseSide, storm7Events, storm7Copies))
	})

	var b strings.Builder
	b.WriteString("\nEffects performed by the protected endpoint (n8n " + n8nVersion + ", n8n database PostgreSQL)\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "storm\tn8n mode\tideal\tIdempotent Claim\tRemove Duplicates\t(its failed deliveries)")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", r.storm, r.mode, r.ideal, r.claimEffects, r.baselineEffects, r.baselineErrors)
	}
	tw.Flush()
	b.WriteString("\nideal: one effect per distinct event. Failed deliveries: answers other than 2xx, from\n" +
		"executions that ended in an error (a provider would deliver those again).\n")
	fmt.Print(b.String())
}
