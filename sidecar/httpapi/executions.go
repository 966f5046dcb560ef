package httpapi

import (
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// maxExecutionWorkflows is the most executions one POST
// /v1/executions/workflow names (the settle hook sends the executions
// that ended within its settle delay, at most this many at once).
const maxExecutionWorkflows = 100

// executionWorkflowItem is one execution of POST /v1/executions/workflow.
type executionWorkflowItem struct {
	ExecutionID     string `json:"execution_id"`
	WorkflowID      string `json:"workflow_id"`
	WorkflowVersion string `json:"workflow_version"`
}

// executionWorkflowBody is the body of POST /v1/executions/workflow.
type executionWorkflowBody struct {
	Executions []executionWorkflowItem `json:"executions" validate:"required,min=1"`
}

// executionWorkflowResult is one execution's answer.
type executionWorkflowResult struct {
	ExecutionID string `json:"execution_id"`
	// Entries is how many delivery-log entries took the version.
	Entries int `json:"entries"`
	// Revised is how many copies' causes changed.
	Revised int `json:"revised"`
	// More is present (true) only when the execution's entries span more
	// records than one call writes (claim.MaxExecutionWorkflowRecords).
	More bool `json:"more,omitempty"`
}

// executionWorkflow answers POST /v1/executions/workflow: each execution
// named ran that version of that workflow (claim.Ledger.
// RecordExecutionWorkflow: the version is written on the execution's
// claim entries that name none, and their records' copies are explained
// again). Every item is checked before any is recorded: a bad one is 422
// naming executions[i].<field>, quoting no value. Items are recorded in
// order, each in its own transaction. Answer: {"results": [...]} in
// request order. Sending it again is safe (nothing left to write).
func (s *Server) executionWorkflow(c *fiber.Ctx) error {
	var b executionWorkflowBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	if len(b.Executions) > maxExecutionWorkflows {
		return apperr.Field("executions", "must hold at most %d executions", maxExecutionWorkflows)
	}
	items := make([]claim.ExecutionWorkflow, len(b.Executions))
	for i, e := range b.Executions {
		items[i] = claim.ExecutionWorkflow{ExecutionID: e.ExecutionID, WorkflowID: e.WorkflowID, WorkflowVersion: e.WorkflowVersion}
		if err := claim.CheckExecutionWorkflow(items[i]); err != nil {
			if ae := apperr.As(err); ae != nil && ae.Field != "" {
				ae.Field = fmt.Sprintf("executions[%d].%s", i, ae.Field)
			}
			return err
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	out := struct {
		Results []executionWorkflowResult `json:"results"`
	}{Results: make([]executionWorkflowResult, 0, len(items))}
	entries, revised := 0, 0
	for _, w := range items {
		res, err := s.cfg.Ledger.RecordExecutionWorkflow(ctx, tenant(c), w)
		if err != nil {
			return err
		}
		entries += res.Entries
		revised += res.Revised
		out.Results = append(out.Results, executionWorkflowResult{ExecutionID: w.ExecutionID,
			Entries: res.Entries, Revised: res.Revised, More: res.More})
	}
	s.cfg.Logger.Debug().Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Str("tenant", tenant(c)).
		Int("executions", len(items)).Int("entries", entries).Int("revised", revised).
		Msg("executions' workflow versions recorded")
	return c.JSON(out)
}
