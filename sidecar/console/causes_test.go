package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The record page says, per delivery-log row, why a copy came: the cause
// in plain words with its evidence.
func TestRecordPageShowsDuplicateCause(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	won, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "orders", EventID: "o-1"},
		PayloadHash: strings.Repeat("ab", 32), ExecutionID: "exec-1"})
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	again, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "orders", EventID: "o-1"},
		PayloadHash: strings.Repeat("ab", 32), ExecutionID: "exec-2", ExecutionMode: "manual"})
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, again.Outcome)
	require.Equal(t, claim.CauseOperatorReplay, again.Cause)

	b := e.browser(t)
	b.signIn(keyA)
	r := b.get("/ui/claims/" + won.ID)
	require.Equal(t, http.StatusOK, r.status, e.logs.String())
	require.Contains(t, r.body, `data-cause="operator_replay"`)
	got := texts(r.body, "delivery-cause")
	require.Len(t, got, 1, "only the copy has a cause")
	require.Equal(t, "Why this copy came: "+claim.CauseOperatorReplay.Explain()+
		" (n8n execution exec-2 runs in manual mode (someone ran the workflow by hand)).", got[0])
}

// The record page names the workflow and version each claim of the
// delivery log came from, and says two versions in words.
func TestRecordPageShowsWorkflowVersions(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	won, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "orders", EventID: "o-2"},
		ExecutionID: "exec-1", WorkflowID: "wf-1", WorkflowVersion: "v-old"})
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	again, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "orders", EventID: "o-2"},
		ExecutionID: "exec-2", WorkflowID: "wf-1", WorkflowVersion: "v-new"})
	require.NoError(t, err)
	require.Equal(t, claim.CauseN8nTwoVersions, again.Cause)

	b := e.browser(t)
	b.signIn(keyA)
	r := b.get("/ui/claims/" + won.ID)
	require.Equal(t, http.StatusOK, r.status, e.logs.String())
	require.Equal(t, []string{"workflow wf-1 version v-old", "workflow wf-1 version v-new"}, texts(r.body, "delivery-workflow"))
	require.Contains(t, r.body, `data-cause="n8n_two_versions"`)
	got := texts(r.body, "delivery-cause")
	require.Len(t, got, 1)
	require.Contains(t, got[0], claim.CauseN8nTwoVersions.Explain())
	require.Contains(t, got[0], "execution exec-1 ran workflow wf-1 version v-old and execution exec-2 ran workflow wf-1 version v-new")
}
