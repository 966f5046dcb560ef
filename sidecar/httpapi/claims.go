package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// claimBody is the body of POST /v1/claims and one item of a batch.
type claimBody struct {
	Source        string         `json:"source" validate:"required,max_source"`
	EventID       string         `json:"event_id" validate:"max_event_id"`
	KeyParts      []string       `json:"key_parts" validate:"omitempty,min=1,max_key_parts,dive,max_event_id"`
	KeyFields     jsontext.Value `json:"key_fields"`
	EventType     string         `json:"event_type" validate:"max_event_type"`
	Action        string         `json:"action" validate:"max_action"`
	Payload       jsontext.Value `json:"payload"`
	PayloadHash   string         `json:"payload_hash" validate:"omitempty,len=64,hexadecimal,lowercase"`
	LeaseSeconds  *int           `json:"lease_seconds" validate:"omitempty,min=1"`
	ObjectID      string         `json:"object_id" validate:"max_object_id"`
	ObjectVersion *int64         `json:"object_version"`
	ExecutionID   string         `json:"execution_id" validate:"max_execution_id"`
	RequestID     string         `json:"request_id" validate:"max_request_id"`
	// LeasePolicy is the claim's own lease policy, "reclaim" or "review"
	// (see claim.Request.LeasePolicy); absent takes the source's. A
	// present value must be one of the two (not "", not another case).
	LeasePolicy *string `json:"lease_policy" validate:"omitempty,oneof=reclaim review"`
	// WaitSeconds lets an in_progress claim wait for the holder (0 to
	// claim.MaxWait seconds; see claim.Waiter). Not part of the request
	// the ledger decides.
	WaitSeconds *int `json:"wait_seconds" validate:"omitempty,min=0,max_wait_seconds"`
	// ExecutionMode is the claiming n8n execution's mode (getMode():
	// webhook, trigger, retry, manual…; see claim.Request.ExecutionMode),
	// absent when unknown.
	ExecutionMode string `json:"execution_mode" validate:"max_execution_mode"`
	// Shadow asks for shadow mode (observe only; claim.Request.Shadow):
	// the answer is won, with shadow.would_be the decision. A claim of a
	// source in shadow is one whatever this says.
	Shadow bool `json:"shadow"`
	// WorkflowID and WorkflowVersion name the claiming workflow and its
	// version (claim.Request.WorkflowID, WorkflowVersion; at most
	// claim.MaxWorkflowFieldLen bytes of printable ASCII each), absent
	// when unknown.
	WorkflowID      string `json:"workflow_id"`
	WorkflowVersion string `json:"workflow_version"`
	// Reconciler names the reconciler claimd calls if the attempt this
	// claim wins ends unknown (claim.Request.Reconciler): one configured
	// under the sources file's reconcilers; absent or "" takes the
	// source's. A name not configured is 422 naming reconciler.
	Reconciler string `json:"reconciler"`
}

// wait is how long the claim may wait for a concurrent holder.
func (b claimBody) wait() time.Duration {
	if b.WaitSeconds == nil {
		return 0
	}
	return time.Duration(*b.WaitSeconds) * time.Second
}

// request turns a decoded body into a ledger request: it derives the event
// id from exactly one of event_id, key_parts and key_fields, and hashes the
// payload (claim.PayloadHash: exact canonical JSON without the source's
// volatile fields; from doc, the body as decoded, when given). No identity
// part may be empty: an empty key part, or a null or empty value in
// key_fields, would make different events share one key, so each is
// refused naming it.
func (b claimBody) request(tenant, prefix string, p claim.Policy, doc *strictjson.Doc) (claim.Request, error) {
	r := claim.Request{Tenant: tenant, Key: claim.Key{Source: b.Source, Action: b.Action},
		EventType: b.EventType, ObjectID: b.ObjectID, ObjectVersion: b.ObjectVersion, ExecutionID: b.ExecutionID,
		RequestID: b.RequestID}
	given := 0
	for _, set := range []bool{b.EventID != "", b.KeyParts != nil, isSet(b.KeyFields)} {
		if set {
			given++
		}
	}
	if given != 1 {
		return r, apperr.Field(prefix+"event_id", "give exactly one of event_id, key_parts or key_fields")
	}
	switch {
	case b.EventID != "":
		r.EventID = b.EventID
	case b.KeyParts != nil:
		if len(b.KeyParts) == 0 {
			return r, apperr.Field(prefix+"key_parts", "must hold at least one part")
		}
		for i, part := range b.KeyParts {
			if part == "" {
				return r, apperr.Field(fmt.Sprintf("%skey_parts[%d]", prefix, i),
					"is empty: every key part must have a value, or different events would share one key")
			}
			if strings.ContainsRune(part, 0) {
				return r, apperr.Field(fmt.Sprintf("%skey_parts[%d]", prefix, i), "must not contain NUL characters")
			}
		}
		r.EventID = claim.CompositeEventID(b.KeyParts...)
	default:
		id, err := claim.HashedEventID(b.KeyFields)
		if err != nil {
			return r, fieldError(prefix+"key_fields", err)
		}
		r.EventID = id
	}
	if isSet(b.Payload) && b.PayloadHash != "" {
		return r, apperr.Field(prefix+"payload_hash", "give payload or payload_hash, not both")
	}
	r.PayloadHash = b.PayloadHash
	if isSet(b.Payload) {
		// The payload was read with the body (doc): hashed from there, the
		// hash claim.PayloadHash gives its bytes.
		var h string
		var ok bool
		if doc != nil {
			h, ok = claim.PayloadHashAt(doc, payloadPointer, p.Volatile()...)
		}
		if !ok {
			var err error
			if h, err = claim.PayloadHash(b.Payload, p.Volatile()...); err != nil {
				return r, fieldError(prefix+"payload", err)
			}
		}
		r.PayloadHash = h
	}
	if b.LeaseSeconds != nil {
		r.Lease = seconds(*b.LeaseSeconds)
	}
	if b.LeasePolicy != nil {
		r.LeasePolicy = claim.LeasePolicy(*b.LeasePolicy)
	}
	r.ExecutionMode = b.ExecutionMode
	r.Shadow = b.Shadow
	r.WorkflowID, r.WorkflowVersion = b.WorkflowID, b.WorkflowVersion
	r.Reconciler = b.Reconciler
	return r, nil
}

// fieldError names the member of field (a JSON pointer after it) that a
// strictjson error is about.
func fieldError(field string, err error) error {
	var se *strictjson.Error
	if errors.As(err, &se) {
		return apperr.Field(field+se.Pointer, "%s", se.Reason)
	}
	return apperr.Field(field, "is not valid")
}

// seconds converts n seconds to a Duration, saturating instead of
// overflowing: a huge lease_seconds must reach the ledger's range check as
// huge, not wrap around to a small or negative lease.
func seconds(n int) time.Duration {
	const most = math.MaxInt64 / int64(time.Second)
	switch {
	case int64(n) > most:
		return math.MaxInt64
	case int64(n) < -most:
		return math.MinInt64
	}
	return time.Duration(n) * time.Second
}

// payloadPointer is where a claim body holds its payload.
var payloadPointer, _ = strictjson.ParsePointer("/payload")

func isSet(raw jsontext.Value) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// claimResult is one claim answer on the wire.
type claimResult struct {
	Outcome           claim.Outcome `json:"outcome"`
	ClaimToken        string        `json:"claim_token,omitempty"`
	RetryAfterSeconds *int          `json:"retry_after_seconds,omitempty"`
	// Cause is why a duplicate or in_progress claim is a copy
	// (claim.Cause), as its delivery-log entry says.
	Cause string `json:"cause,omitempty"`
	// Shadow is present on the answer of a shadow claim (outcome won):
	// what claimd decided and recorded, and would have answered.
	Shadow *shadowJSON `json:"shadow,omitempty"`
	recordJSON
}

// shadowJSON is a shadow claim's decision on the wire: would_be the
// outcome (won, duplicate, in_progress, conflict, …), cause why a
// duplicate or in_progress copy came (claim.Cause).
type shadowJSON struct {
	WouldBe claim.Outcome `json:"would_be"`
	Cause   string        `json:"cause,omitempty"`
}

// shadowOf is r's shadow member, nil for a claim that is not a shadow one.
func shadowOf(r claim.Result) *shadowJSON {
	if r.WouldBe == "" {
		return nil
	}
	return &shadowJSON{WouldBe: r.WouldBe, Cause: string(r.Cause)}
}

// recordJSON is a claim record on the wire. Times are RFC 3339 in UTC.
// KeyExpiresAt and KeyExpiry say when the record's key may be forgotten
// under the current policy (claim.Ledger.KeyExpiry: updated_at plus the
// key retention, whenever asked): the exact date ("fixed") of a terminal
// record, a lower bound ("not_before") of an open one.
type recordJSON struct {
	ClaimID        string      `json:"claim_id"`
	IdempotencyKey string      `json:"idempotency_key"`
	Source         string      `json:"source"`
	EventID        string      `json:"event_id"`
	Action         string      `json:"action"`
	EventType      string      `json:"event_type,omitempty"`
	State          claim.State `json:"state"`
	Attempt        int         `json:"attempt"`
	MaxAttempts    int         `json:"max_attempts"`
	LeasePolicy    string      `json:"lease_policy"`
	// Reconciler is the reconciler the claim that won the current attempt
	// named (claim.Record.Reconciler); absent when it named none (the
	// source's default reconciler applies, if any).
	Reconciler    string         `json:"reconciler,omitempty"`
	ResultRef     string         `json:"result_ref,omitempty"`
	PayloadHash   string         `json:"payload_hash,omitempty"`
	ReceiptHash   string         `json:"receipt_hash,omitempty"`
	Origin        string         `json:"origin,omitempty"`
	LeaseUntil    *time.Time     `json:"lease_until,omitempty"`
	NextAttemptAt *time.Time     `json:"next_attempt_at,omitempty"`
	LastError     string         `json:"last_error,omitempty"`
	ObjectID      string         `json:"object_id,omitempty"`
	ObjectVersion *int64         `json:"object_version,omitempty"`
	ConflictCount int            `json:"conflict_count"`
	CreatedAt     time.Time      `json:"created_at"`
	UpdatedAt     time.Time      `json:"updated_at"`
	CompletedAt   *time.Time     `json:"completed_at,omitempty"`
	KeyExpiresAt  time.Time      `json:"key_expires_at"`
	KeyExpiry     string         `json:"key_expiry"`
	Deliveries    []deliveryJSON `json:"deliveries,omitempty"`
	// Reconcile is the claim's reconcile (GET /v1/claims/{id} and the
	// reconcile answer only), when it has one.
	Reconcile *reconcileJSON `json:"reconcile,omitempty"`
}

type deliveryJSON struct {
	At          time.Time `json:"at"`
	Outcome     string    `json:"outcome"`
	Attempt     int       `json:"attempt"`
	PayloadHash string    `json:"payload_hash,omitempty"`
	ExecutionID string    `json:"execution_id,omitempty"`
	Detail      string    `json:"detail,omitempty"`
	Actor       string    `json:"actor,omitempty"`
	Door        string    `json:"door,omitempty"`
	Cause       string    `json:"cause,omitempty"`
	CauseNote   string    `json:"cause_note,omitempty"`
	// Shadow marks the entry of a shadow claim: outcome is what claimd
	// decided, the caller was answered won.
	Shadow bool `json:"shadow,omitempty"`
	// WorkflowID and WorkflowVersion are the claiming workflow's id and
	// version as the claim named them.
	WorkflowID      string `json:"workflow_id,omitempty"`
	WorkflowVersion string `json:"workflow_version,omitempty"`
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// record is r on the wire with its key expiry (claim.Ledger.KeyExpiry).
func (s *Server) record(r claim.Record) recordJSON {
	return toRecordJSON(r, s.cfg.Ledger.KeyExpiry(r))
}

func toRecordJSON(r claim.Record, e claim.KeyExpiry) recordJSON {
	out := recordJSON{
		ClaimID: r.ID, IdempotencyKey: r.IdempotencyKey, Source: r.Source, EventID: r.EventID, Action: r.Action,
		EventType: r.EventType, State: r.State, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		LeasePolicy: string(r.LeasePolicy), Reconciler: r.Reconciler, ResultRef: r.ResultRef, PayloadHash: r.PayloadHash, ReceiptHash: r.ReceiptHash,
		Origin:     r.Origin,
		LeaseUntil: utc(r.LeaseUntil), NextAttemptAt: utc(r.NextAttemptAt), LastError: r.LastError,
		ObjectID: r.ObjectID, ObjectVersion: r.ObjectVersion, ConflictCount: r.ConflictCount,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), CompletedAt: utc(r.CompletedAt),
		KeyExpiresAt: e.At.UTC(), KeyExpiry: e.Kind(),
	}
	if r.State != claim.StateProcessing {
		out.LeaseUntil = nil
	}
	for _, d := range r.Deliveries {
		out.Deliveries = append(out.Deliveries, deliveryJSON{At: d.At.UTC(), Outcome: d.Outcome, Attempt: d.Attempt,
			PayloadHash: d.PayloadHash, ExecutionID: d.ExecutionID, Detail: d.Detail, Actor: d.Actor,
			Door: d.Door, Cause: string(d.Cause), CauseNote: d.CauseNote, Shadow: d.Shadow,
			WorkflowID: d.WorkflowID, WorkflowVersion: d.WorkflowVersion})
	}
	return out
}

// toClaimResult is r on the wire, with retry_after_seconds (whole seconds,
// rounded up) for in_progress and retry_later: see claim.Ledger.RetryAfter;
func (s *Server) toClaimResult(ctx context.Context, r claim.Result, now time.Time) claimResult {
	out := claimResult{Outcome: r.Outcome, ClaimToken: r.Token, recordJSON: s.record(r.Record)}
	if after, ok := s.cfg.Ledger.RetryAfter(ctx, r, now); ok {
		secs := max(1, int(math.Ceil(after.Seconds())))
		out.RetryAfterSeconds = &secs
	}
	out.Cause = string(r.Cause)
	if out.Shadow = shadowOf(r); out.Shadow != nil {
		out.Cause = "" // the answer is won: the copy's cause is the shadow decision's
	}
	return out
}

func (s *Server) claimOne(c *fiber.Ctx) error {
	var b claimBody
	doc, err := s.decodeBodyDoc(c, &b)
	if err != nil {
		return err
	}
	r, err := b.request(tenant(c), "", s.cfg.Ledger.Policy(b.Source), doc)
	doc.Release()
	if err != nil {
		return err
	}
	var res claim.Result
	if wait := b.wait(); wait > 0 && s.cfg.Waiter != nil {
		// Each database step has its own RequestTimeout; the wait has its
		// own bound (wait_seconds).
		res, err = s.cfg.Waiter.Claim(c.UserContext(), r, wait)
	} else {
		ctx, cancel := s.ctx(c)
		defer cancel()
		res, err = s.cfg.Ledger.Claim(ctx, r)
	}
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	return c.JSON(s.toClaimResult(ctx, res, time.Now()))
}

type batchBody struct {
	Claims []jsontext.Value `json:"claims" validate:"required"`
}

// batchItem is one entry of a batch answer: a claim result or an error.
type batchItem struct {
	*claimResult
	Error *ErrorDetail `json:"error,omitempty"`
}

func (i batchItem) MarshalJSON() ([]byte, error) {
	if i.Error != nil {
		return json.Marshal(struct {
			Error *ErrorDetail `json:"error"`
		}{i.Error})
	}
	return json.Marshal(i.claimResult)
}

func (s *Server) claimBatch(c *fiber.Ctx) error {
	var b batchBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	if len(b.Claims) == 0 {
		return apperr.Field("claims", "must hold at least one claim")
	}
	if len(b.Claims) > s.cfg.MaxBatch {
		return apperr.Field("claims", "must hold at most %d claims", s.cfg.MaxBatch)
	}
	items := make([]batchItem, len(b.Claims))
	var reqs []claim.Request
	var waits []time.Duration
	var idx []int
	for i, raw := range b.Claims {
		prefix := fmt.Sprintf("claims[%d].", i)
		var cb claimBody
		doc, err := s.decodeDoc(raw, &cb, prefix)
		var r claim.Request
		if err == nil {
			r, err = cb.request(tenant(c), prefix, s.cfg.Ledger.Policy(cb.Source), doc)
			doc.Release()
		}
		if err == nil {
			err = s.cfg.Ledger.Validate(r)
			if e := apperr.As(err); e != nil && e.Field != "" {
				e.Field = prefix + e.Field
			}
		}
		if err != nil {
			e := apperr.As(err)
			if e == nil {
				return err
			}
			items[i].Error = &ErrorDetail{Code: e.Code, Message: e.Message, Field: e.Field}
			continue
		}
		reqs = append(reqs, r)
		waits = append(waits, cb.wait())
		idx = append(idx, i)
	}
	var results []claim.Result
	var err error
	if slices.ContainsFunc(waits, func(w time.Duration) bool { return w > 0 }) && s.cfg.Waiter != nil {
		results, err = s.cfg.Waiter.ClaimBatch(c.UserContext(), reqs, waits)
	} else {
		ctx, cancel := s.ctx(c)
		defer cancel()
		results, err = s.cfg.Ledger.ClaimBatch(ctx, reqs)
	}
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	now := time.Now()
	for j, res := range results {
		cr := s.toClaimResult(ctx, res, now)
		items[idx[j]].claimResult = &cr
	}
	return c.JSON(fiber.Map{"results": items})
}

func (s *Server) get(c *fiber.Ctx) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	rec, err := s.cfg.Ledger.Get(ctx, tenant(c), c.Params("id"))
	if err != nil {
		return err
	}
	return s.recordWithReconcile(ctx, c, rec)
}

// recordWithReconcile answers one record with its reconcile, when it has
// one (GET /v1/claims/{id} and the lookup by key alike).
func (s *Server) recordWithReconcile(ctx context.Context, c *fiber.Ctx, rec claim.Record) error {
	out := s.record(rec)
	st, err := s.cfg.Ledger.ReconcileOf(ctx, tenant(c), rec.ID)
	if err != nil {
		return err
	}
	out.Reconcile = toReconcileJSON(st)
	return c.JSON(out)
}

func (s *Server) find(c *fiber.Ctx) error {
	if err := httpquery.Once(c.Context().QueryArgs(), "source", "event_id", "action"); err != nil {
		return err
	}
	k := claim.Key{Source: c.Query("source"), EventID: c.Query("event_id"), Action: c.Query("action")}
	if k.Source == "" {
		return apperr.Field("source", "is required (query parameter)")
	}
	if k.EventID == "" {
		return apperr.Field("event_id", "is required (query parameter)")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rec, err := s.cfg.Ledger.Find(ctx, tenant(c), k)
	if err != nil {
		return err
	}
	return s.recordWithReconcile(ctx, c, rec)
}

// listJSON is the answer of GET /v1/claims/list.
type listJSON struct {
	Claims     []recordJSON `json:"claims"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// list answers GET /v1/claims/list: the records in one open state, or,
// with execution_id, the records whose current attempt that execution won
// (any state, state optional). See claim.Ledger.List.
func (s *Server) list(c *fiber.Ctx) error {
	if err := httpquery.Once(c.Context().QueryArgs(), "state", "source", "cursor", "execution_id", "limit"); err != nil {
		return err
	}
	f := claim.ListFilter{State: claim.State(c.Query("state")), Source: c.Query("source"), Cursor: c.Query("cursor"),
		ExecutionID: c.Query("execution_id")}
	if c.Context().QueryArgs().Has("execution_id") && f.ExecutionID == "" {
		return apperr.Field("execution_id", "must not be empty (omit it to list by state)")
	}
	if f.State == "" && f.ExecutionID == "" {
		return apperr.Field("state", "is required (query parameter) unless execution_id is given")
	}
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > claim.MaxListLimit {
			return apperr.Field("limit", "must be an integer from 1 to %d", claim.MaxListLimit)
		}
		f.Limit = n
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	recs, next, err := s.cfg.Ledger.List(ctx, tenant(c), f)
	if err != nil {
		return err
	}
	out := listJSON{Claims: make([]recordJSON, 0, len(recs)), NextCursor: next}
	for _, r := range recs {
		out.Claims = append(out.Claims, s.record(r))
	}
	return c.JSON(out)
}

type completeBody struct {
	ClaimToken string `json:"claim_token" validate:"required"`
	ResultRef  string `json:"result_ref" validate:"max_result_ref"`
}

func (s *Server) complete(c *fiber.Ctx) error {
	var b completeBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rec, err := s.cfg.Ledger.Complete(ctx, tenant(c), c.Params("id"), b.ClaimToken, b.ResultRef)
	if err != nil {
		return err
	}
	return c.JSON(s.record(rec))
}

type failBody struct {
	ClaimToken string `json:"claim_token" validate:"required"`
	Error      string `json:"error" validate:"required,max_error"`
	Retry      string `json:"retry" validate:"required,oneof=retryable permanent unknown"`
}

func (s *Server) fail(c *fiber.Ctx) error {
	var b failBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rec, err := s.cfg.Ledger.Fail(ctx, tenant(c), c.Params("id"), b.ClaimToken, claim.FailKind(b.Retry), b.Error)
	if err != nil {
		return err
	}
	return c.JSON(s.record(rec))
}

type extendBody struct {
	ClaimToken   string `json:"claim_token" validate:"required"`
	LeaseSeconds int    `json:"lease_seconds" validate:"required,min=1"`
}

func (s *Server) extend(c *fiber.Ctx) error {
	var b extendBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rec, err := s.cfg.Ledger.Extend(ctx, tenant(c), c.Params("id"), b.ClaimToken, seconds(b.LeaseSeconds))
	if err != nil {
		return err
	}
	return c.JSON(s.record(rec))
}

type resolveBody struct {
	Outcome   string `json:"outcome" validate:"required,oneof=completed retry failed"`
	ResultRef string `json:"result_ref" validate:"max_result_ref"`
	Note      string `json:"note" validate:"required,max_note"`
}

func (s *Server) resolve(c *fiber.Ctx) error {
	var b resolveBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	p, _ := c.Locals(principalKey).(auth.Principal)
	rec, err := s.cfg.Ledger.ResolveAs(ctx, p.Tenant, c.Params("id"), claim.ResolveOutcome(b.Outcome), b.ResultRef, b.Note, p.KeyPrefix)
	if err != nil {
		return err
	}
	return c.JSON(s.record(rec))
}

type releaseBody struct {
	Note string `json:"note" validate:"required,max_note"`
}

// release moves a stuck processing record to unknown (an operator's
// decision that its holder is gone with the effect's outcome unknown):
// the holder's token no longer fails or extends it, a late Complete with
// it is still kept, and claims of the key answer unknown until it is
// resolved. 409 invalid_state for a record in any other state.
func (s *Server) release(c *fiber.Ctx) error {
	var b releaseBody
	if err := s.decodeBody(c, &b); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	p, _ := c.Locals(principalKey).(auth.Principal)
	rec, err := s.cfg.Ledger.Release(ctx, p.Tenant, c.Params("id"), b.Note, p.KeyPrefix)
	if err != nil {
		return err
	}
	return c.JSON(s.record(rec))
}
