package httpapi

import (
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The settle batches report the outcome of many effects in one request:
// POST /v1/claims/complete/batch and POST /v1/claims/fail/batch take
// {"claims": [...]}, each item what the single route takes plus its
// claim_id, and answer {"results": [...]} in request order, each entry the
// record or {"error": {...}} as the single route would answer that item
// alone. An item's error (invalid field, not_found, lease_lost) does not
// affect the others; the request as a whole fails only when the body is
// not a batch (400/413/422) or the database fails (500/503), and then no
// item of it is kept. Sending the same batch again is safe: an item already
// settled by the same token (and for fail the same retry and error) is
// answered with its record, as the single routes answer a repeat.

// completeItem is one item of POST /v1/claims/complete/batch.
type completeItem struct {
	ClaimID    string `json:"claim_id" validate:"required"`
	ClaimToken string `json:"claim_token" validate:"required"`
	ResultRef  string `json:"result_ref" validate:"max_result_ref"`
}

// failItem is one item of POST /v1/claims/fail/batch.
type failItem struct {
	ClaimID    string `json:"claim_id" validate:"required"`
	ClaimToken string `json:"claim_token" validate:"required"`
	Error      string `json:"error" validate:"required,max_error"`
	Retry      string `json:"retry" validate:"required,oneof=retryable permanent unknown"`
}

// settledItem is one entry of a settle batch answer: a record or an error.
type settledItem struct {
	*recordJSON
	Error *ErrorDetail `json:"error,omitempty"`
}

func (i settledItem) MarshalJSON() ([]byte, error) {
	if i.Error != nil {
		return json.Marshal(struct {
			Error *ErrorDetail `json:"error"`
		}{i.Error})
	}
	return json.Marshal(i.recordJSON)
}

// itemError is the answer entry for err, an item's own error; its field is
// prefixed with the item's place ("claims[3]."). Any other error is not an
// item's and fails the request.
func itemError(err error, prefix string) (*ErrorDetail, error) {
	e := apperr.As(err)
	if e == nil || e.Code == apperr.Internal || e.Code == apperr.Unavailable {
		return nil, err
	}
	d := &ErrorDetail{Code: e.Code, Message: e.Message}
	if e.Field != "" {
		d.Field = prefix + e.Field
	}
	return d, nil
}

// settleItems decodes the batch body of c: each raw item into a fresh T
// (strictly, validated); an item that fails gets its error entry in the
// answer, the others are returned with their places.
func settleItems[T any](s *Server, c *fiber.Ctx) ([]T, []int, []settledItem, error) {
	var b batchBody
	if err := s.decodeBody(c, &b); err != nil {
		return nil, nil, nil, err
	}
	if len(b.Claims) == 0 {
		return nil, nil, nil, apperr.Field("claims", "must hold at least one claim")
	}
	if len(b.Claims) > s.cfg.MaxBatch {
		return nil, nil, nil, apperr.Field("claims", "must hold at most %d claims", s.cfg.MaxBatch)
	}
	answer := make([]settledItem, len(b.Claims))
	var items []T
	var places []int
	for i, raw := range b.Claims {
		var item T
		if err := s.decode(raw, &item, fmt.Sprintf("claims[%d].", i)); err != nil {
			d, err := itemError(err, "")
			if err != nil {
				return nil, nil, nil, err
			}
			answer[i].Error = d
			continue
		}
		items = append(items, item)
		places = append(places, i)
	}
	return items, places, answer, nil
}

// fillSettled puts the ledger's results into the answer at their places.
func (s *Server) fillSettled(answer []settledItem, places []int, results []claim.Settled) error {
	for j, r := range results {
		i := places[j]
		if r.Err != nil {
			d, err := itemError(r.Err, fmt.Sprintf("claims[%d].", i))
			if err != nil {
				return err
			}
			answer[i].Error = d
			continue
		}
		rec := s.record(r.Record)
		answer[i].recordJSON = &rec
	}
	return nil
}

func (s *Server) completeBatch(c *fiber.Ctx) error {
	items, places, answer, err := settleItems[completeItem](s, c)
	if err != nil {
		return err
	}
	reqs := make([]claim.Completion, len(items))
	for j, it := range items {
		reqs[j] = claim.Completion{ID: it.ClaimID, Token: it.ClaimToken, ResultRef: it.ResultRef}
	}
	if len(reqs) > 0 {
		ctx, cancel := s.ctx(c)
		defer cancel()
		results, err := s.cfg.Ledger.CompleteBatch(ctx, tenant(c), reqs)
		if err != nil {
			return err
		}
		if err := s.fillSettled(answer, places, results); err != nil {
			return err
		}
	}
	return c.JSON(fiber.Map{"results": answer})
}

func (s *Server) failBatch(c *fiber.Ctx) error {
	items, places, answer, err := settleItems[failItem](s, c)
	if err != nil {
		return err
	}
	reqs := make([]claim.Failure, len(items))
	for j, it := range items {
		reqs[j] = claim.Failure{ID: it.ClaimID, Token: it.ClaimToken, Kind: claim.FailKind(it.Retry), Error: it.Error}
	}
	if len(reqs) > 0 {
		ctx, cancel := s.ctx(c)
		defer cancel()
		results, err := s.cfg.Ledger.FailBatch(ctx, tenant(c), reqs)
		if err != nil {
			return err
		}
		if err := s.fillSettled(answer, places, results); err != nil {
			return err
		}
	}
	return c.JSON(fiber.Map{"results": answer})
}

// failExecutionBody is the body of POST /v1/claims/fail/execution.
type failExecutionBody struct {
	ExecutionID string `json:"execution_id" validate:"required,max_execution_id"`
	Source      string `json:"source" validate:"max_source"`
	Error       string `json:"error" validate:"required,max_error"`
	Retry       string `json:"retry" validate:"required,oneof=retryable permanent unknown"`
}

// failExecutionJSON is the answer of POST /v1/claims/fail/execution.
type failExecutionJSON struct {
	Claims []recordJSON `json:"claims"`
	// More is present (true) only when the execution held more processing
	// records than one call fails (claim.MaxExecutionFail).
	More bool `json:"more,omitempty"`
}

// failExecution answers POST /v1/claims/fail/execution: it fails every
// processing record of the tenant whose current attempt the execution won
// (claim.Ledger.FailExecution), for an n8n Error Trigger workflow after an
// execution crashed between Claim and Complete. Answer: {"claims": [the
// records after the fail, by claim id], "more": true when more remain};
// {"claims": []} when the execution holds none, so calling again is safe.
func (s *Server) failExecution(c *fiber.Ctx) error {
	var b failExecutionBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	res, err := s.cfg.Ledger.FailExecution(ctx, tenant(c), claim.ExecutionFailure{
		ExecutionID: b.ExecutionID, Source: b.Source, Kind: claim.FailKind(b.Retry), Error: b.Error})
	if err != nil {
		return err
	}
	s.cfg.Logger.Info().Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Str("tenant", tenant(c)).
		Str("execution_id", b.ExecutionID).Str("retry", b.Retry).Int("failed", len(res.Records)).Bool("more", res.More).
		Msg("claims of an execution failed")
	out := failExecutionJSON{Claims: make([]recordJSON, 0, len(res.Records)), More: res.More}
	for _, r := range res.Records {
		out.Claims = append(out.Claims, s.record(r))
	}
	return c.JSON(out)
}
