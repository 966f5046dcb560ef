package httpapi

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
)

// Reconciler applies reconcilers' answers (reconcile.Runner.Answer).
type Reconciler interface {
	Answer(ctx context.Context, tenant, claimID, token string, a reconcile.Answer) (claim.ReconcileResult, error)
}

// newReconciler is cfg.Reconciler, else one over the ledger (and the
// inbox's re-dispatch) that counts in cfg.Metrics.
func (s *Server) newReconciler() Reconciler {
	if s.cfg.Reconciler != nil {
		return s.cfg.Reconciler
	}
	o := reconcile.Options{Ledger: s.cfg.Ledger, Logger: s.cfg.Logger}
	if s.cfg.Inbox != nil {
		o.Redispatch = s.cfg.Inbox.RedispatchTx
	}
	if s.cfg.Metrics != nil {
		o.Observer = s.cfg.Metrics.Reconcile()
	}
	return reconcile.New(o)
}

// reconcileJSON is a claim's reconcile on the wire (the member
// "reconcile" of a record, when the claim has one): the current unknown
// episode's calls to its reconciler.
type reconcileJSON struct {
	// State: waiting (the next call at next_call_at), calling (a call in
	// flight until answer_by), answered, gave_up (an operator must resolve
	// the claim), dropped (the claim was settled otherwise first).
	State      claim.ReconcileStatus `json:"state"`
	Reconciler string                `json:"reconciler"`
	Calls      int                   `json:"calls"`
	MaxCalls   int                   `json:"max_calls"`
	NextCallAt *time.Time            `json:"next_call_at,omitempty"`
	AnswerBy   *time.Time            `json:"answer_by,omitempty"`
	// LastError is the fixed error class of the last failed call
	// (timeout, unreachable, status_5xx, status_4xx, bad_answer).
	LastError string                 `json:"last_error,omitempty"`
	Verdict   claim.ReconcileVerdict `json:"verdict,omitempty"`
	ResultRef string                 `json:"result_ref,omitempty"`
	Note      string                 `json:"note,omitempty"`
}

func toReconcileJSON(st *claim.ReconcileState) *reconcileJSON {
	if st == nil {
		return nil
	}
	out := &reconcileJSON{State: st.State, Reconciler: st.Reconciler, Calls: st.Calls, MaxCalls: st.MaxCalls,
		LastError: st.LastError, Verdict: st.Verdict, ResultRef: st.ResultRef, Note: st.Note}
	switch st.State {
	case claim.ReconcileWaiting:
		at := st.NextCallAt.UTC()
		out.NextCallAt = &at
	case claim.ReconcileCalling:
		out.AnswerBy = utc(st.CallDeadline)
	}
	return out
}

// reconcileBody is a reconciler's answer through the API.
type reconcileBody struct {
	Token     string `json:"reconcile_token" validate:"required,uuid"`
	Verdict   string `json:"verdict" validate:"required,oneof=done not_done still_unknown"`
	ResultRef string `json:"result_ref" validate:"max_result_ref"`
	Note      string `json:"note" validate:"max_note"`
}

// reconcileAnswer is POST /v1/claims/{id}/reconcile: a reconciler's
// answer to the call with reconcile_token (from the call's body), before
// its answer_by. It answers the record with its reconcile. 409
// reconcile_token_stale: not the call in flight (answered, failed, past
// answer_by, or a later call); 409 invalid_state: the claim was settled
// otherwise first (nothing applied), or another verdict was applied with
// this token already. The same verdict again answers 200 as it is.
func (s *Server) reconcileAnswer(c *fiber.Ctx) error {
	var b reconcileBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	res, err := s.reconcile.Answer(ctx, tenant(c), c.Params("id"), b.Token,
		reconcile.Answer{Verdict: b.Verdict, ResultRef: b.ResultRef, Note: b.Note})
	if err != nil {
		return err
	}
	out := s.record(res.Record)
	out.Reconcile = toReconcileJSON(&res.Reconcile)
	return c.JSON(out)
}
