package docref_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/docref"
)

func TestSlugify(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"Numbers beyond 2^53 in the forwarded body":                            "numbers-beyond-253-in-the-forwarded-body",
		"Against n8n's Remove Duplicates":                                      "against-n8ns-remove-duplicates",
		"How long `make test` takes":                                           "how-long-make-test-takes",
		"In n8n: the Idempotent Claim Trigger (the first recipe for webhooks)": "in-n8n-the-idempotent-claim-trigger-the-first-recipe-for-webhooks",
		"Walk-through: `inline-claim.json`":                                    "walk-through-inline-claimjson",
	} {
		if got := docref.Slugify(h); got != want {
			t.Errorf("Slugify(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	got := docref.Find("see sidecar/docs/ha.md#high-availability. Runbook: n8n-node/README.md#patterns (step 5) " +
		"and README.md#try-it; not ../docs/manual.md, examples/README.md or sidecar/docs/x.mdx; sidecar/docs/ingest.md.")
	want := []string{"sidecar/docs/ha.md#high-availability", "n8n-node/README.md#patterns", "README.md#try-it", "sidecar/docs/ingest.md"}
	if !slices.Equal(got, want) {
		t.Errorf("Find = %q, want %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	c := &docref.Checker{Root: filepath.Join("..", "..", "..")}
	for _, ok := range []string{"sidecar/docs/ha.md", "sidecar/docs/ha.md#high-availability", "n8n-node/README.md#patterns"} {
		if err := c.Check(ok); err != nil {
			t.Errorf("Check(%q): %v", ok, err)
		}
	}
	// Put together, so that TestCodeReferencesResolve does not read them as references.
	md := ".md"
	for _, bad := range []string{"sidecar/docs/nothing" + md, "sidecar/docs/ha" + md + "#no-such-heading", "sidecar/go.mod"} {
		if err := c.Check(bad); err == nil {
			t.Errorf("Check(%q) found it", bad)
		}
	}
}
