package httpapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// POST /v1/trigger/{source}: the n8n trigger node ("Idempotent Claim
// Trigger") received a provider's webhook request inside n8n and asks
// claimd, in one call, to decide it with the source's rules (the same as
// POST /ingest/{source}: admit) and to claim each of its events. Nothing
// is stored in the inbox and nothing is dispatched: a won event starts an
// n8n execution with the claim in its item, and every other decision is
// answered to the provider by the trigger, with `response`: what claimd's
// own ingest door would answer for the delivery.

// Bounds of a trigger request.
const (
	// MaxTriggerHeaders is the most header lines a trigger request may
	// describe.
	MaxTriggerHeaders = 256
	// MaxTriggerHeaderName is the longest header name, in bytes.
	MaxTriggerHeaderName = 256
	// MaxTriggerHeaderValue is the longest header value, in bytes.
	MaxTriggerHeaderValue = 16 << 10
	// MaxTriggerHeaderBytes bounds the names and values of all headers
	// together, in bytes.
	MaxTriggerHeaderBytes = 64 << 10
	// MaxTriggerQueryBytes is the longest raw query string, in bytes.
	MaxTriggerQueryBytes = 16 << 10
	// triggerEnvelope is what a trigger body holds besides the base64 of
	// the provider's body, at most, in bytes: the headers and the query
	// with every byte JSON-escaped (up to 6 bytes each), the pairs'
	// brackets and the other members, rounded up.
	triggerEnvelope = 512 << 10
)

// triggerBody is the body of POST /v1/trigger/{source}: the provider's
// request as n8n received it.
type triggerBody struct {
	// Method is the provider request's method; only POST is a delivery.
	Method string `json:"method" validate:"required,oneof=GET HEAD POST PUT PATCH DELETE OPTIONS"`
	// Headers are the raw header lines in arrival order, repeats kept
	// (n8n's req.rawHeaders in pairs), each [name, value].
	Headers [][]string `json:"headers" validate:"max_headers"`
	// Query is the raw query string as received, without '?'.
	Query string `json:"query" validate:"max_query"`
	// Body is the standard, padded base64 of the raw body bytes; "" is an
	// empty body.
	Body string `json:"body"`
	// RequestID is the trigger's id of the incoming provider request, the
	// same when it sends this call again after a lost answer: per event
	// the ledger gets requestID(RequestID, index), so the retry gets its
	// win (same claim token) back.
	RequestID string `json:"request_id" validate:"max_request_id"`
	// Test: n8n's test URL: verify and key, claim nothing, write nothing.
	Test bool `json:"test"`
	// WaitSeconds lets an in_progress event wait for its holder, 0 to
	// claim.MaxWait seconds, as POST /v1/claims' wait_seconds.
	WaitSeconds *int `json:"wait_seconds" validate:"omitempty,min=0,max_wait_seconds"`
	// Shadow: the trigger node's shadow mode (observe only): every event
	// is claimed as a shadow claim (claim.Request.Shadow), answered won
	// (so every delivery starts an execution) with shadow.would_be what
	// claimd decided. Events of a source in shadow are shadow claims
	// whatever this says.
	Shadow bool `json:"shadow"`
	// WorkflowID and WorkflowVersion name the workflow whose trigger sent
	// the delivery and its version, absent when unknown; each event's
	// claim carries them (claim.Request.WorkflowID, WorkflowVersion).
	WorkflowID      string `json:"workflow_id"`
	WorkflowVersion string `json:"workflow_version"`
}

// checkHeaders refuses a header list that is not pairs of a token name
// (1 to MaxTriggerHeaderName bytes) and a value (at most
// MaxTriggerHeaderValue bytes, without CR, LF or NUL, as no HTTP request
// can carry them), or that is larger than MaxTriggerHeaderBytes in all;
// the error names the entry (headers[3][1]) and quotes nothing of it.
func (b triggerBody) checkHeaders() error {
	total := 0
	for i, kv := range b.Headers {
		if len(kv) != 2 {
			return apperr.Field(fmt.Sprintf("headers[%d]", i), "must be a [name, value] pair")
		}
		name, value := kv[0], kv[1]
		if name == "" || len(name) > MaxTriggerHeaderName {
			return apperr.Field(fmt.Sprintf("headers[%d][0]", i), "must be a header name of 1 to %d bytes", MaxTriggerHeaderName)
		}
		for j := 0; j < len(name); j++ {
			if !isTokenChar(name[j]) {
				return apperr.Field(fmt.Sprintf("headers[%d][0]", i), "must be a header name (token characters, RFC 9110 section 5.6.2)")
			}
		}
		if len(value) > MaxTriggerHeaderValue {
			return apperr.Field(fmt.Sprintf("headers[%d][1]", i), "must be at most %d bytes", MaxTriggerHeaderValue)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return apperr.Field(fmt.Sprintf("headers[%d][1]", i), "must not contain CR, LF or NUL")
		}
		total += len(name) + len(value)
	}
	if total > MaxTriggerHeaderBytes {
		return apperr.Field("headers", "names and values must be at most %d bytes in all", MaxTriggerHeaderBytes)
	}
	return nil
}

// header returns every value of the named header (case-insensitive) in
// arrival order.
func (b triggerBody) header(name string) []string {
	var out []string
	for _, kv := range b.Headers {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

// rawBody decodes Body: TooLarge (the same words as the ingest door's,
// naming no limit) when it would hold more than limit bytes, which is
// told from its length before anything is decoded; Invalid naming body
// when it is not standard padded base64.
func (b triggerBody) rawBody(limit int) ([]byte, error) {
	enc := base64.StdEncoding.Strict()
	n := len(b.Body)
	if n%4 == 0 && n > 0 {
		n = n/4*3 - strings.Count(b.Body[len(b.Body)-2:], "=")
	} else {
		n = n / 4 * 3
	}
	if n > limit {
		return nil, &apperr.Error{Code: apperr.TooLarge, Field: "body", Message: declaredTooLarge}
	}
	raw, err := enc.DecodeString(b.Body)
	if err != nil || len(b.Body) != enc.EncodedLen(len(raw)) { // newlines are skipped by the decoder: refused here
		return nil, apperr.Field("body", "must be the standard base64 (RFC 4648 section 4, padded) of the raw body bytes")
	}
	return raw, nil
}

// wait is how long an in_progress event may wait for its holder.
func (b triggerBody) wait() time.Duration {
	if b.WaitSeconds == nil {
		return 0
	}
	return time.Duration(*b.WaitSeconds) * time.Second
}

// requestID is the ledger's request id of the index-th event of a
// delivery whose trigger request id is id: id, ':' and the index, or, when
// that is longer than claim.MaxRequestIDLen or id itself starts with
// "sha256:", "sha256:", the hex SHA-256 of id, ':' and the index (so the
// mapping stays one-to-one); "" without an id.
func requestID(id string, index int) string {
	if id == "" {
		return ""
	}
	suffix := ":" + strconv.Itoa(index)
	if len(id)+len(suffix) <= claim.MaxRequestIDLen && !strings.HasPrefix(id, "sha256:") {
		return id + suffix
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:]) + suffix
}

// triggerReply is the answer of POST /v1/trigger/{source}.
type triggerReply struct {
	Decision decision        `json:"decision"`
	Events   []triggerEvent  `json:"events"`
	Response triggerResponse `json:"response"`
	// CredentialQueryParams names the query parameters of the provider's
	// request that carry the source's token
	// (sources.Source.CredentialQueryParams), for the n8n node to leave out
	// of its items (and so of n8n's execution data); [] when none.
	CredentialQueryParams []string `json:"credential_query_params"`
}

// triggerAnswer sends r, naming src's credential query parameters.
func (s *Server) triggerAnswer(c *fiber.Ctx, src *sources.Source, r triggerReply) error {
	r.CredentialQueryParams = src.CredentialQueryParams
	if r.CredentialQueryParams == nil {
		r.CredentialQueryParams = []string{}
	}
	return c.JSON(r)
}

// triggerResponse is the answer the trigger gives the provider.
type triggerResponse struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	// Body is the answer's body as text; absent when it is not UTF-8
	// (then BodyBase64 holds it).
	Body       *string `json:"body,omitempty"`
	BodyBase64 string  `json:"body_base64,omitempty"`
}

func toTriggerResponse(a providerAnswer) triggerResponse {
	r := triggerResponse{Status: a.status, Headers: a.header}
	if r.Headers == nil {
		r.Headers = map[string]string{}
	}
	if utf8.Valid(a.body) {
		text := string(a.body)
		r.Body = &text
	} else {
		r.BodyBase64 = base64.StdEncoding.EncodeToString(a.body)
	}
	return r
}

// triggerEvent is one event of a decided delivery: its claim result (the
// wire shape of POST /v1/claims) with the delivery's event type and, for
// an item of a batch body, the item's own JSON; with test, only its
// identity.
type triggerEvent struct {
	result    *claimResult
	ev        sources.Event
	eventType string
}

func (e triggerEvent) MarshalJSON() ([]byte, error) {
	var payload json.RawMessage
	if e.ev.Event.Payload != nil {
		payload = e.ev.Event.Payload
	}
	if e.result != nil {
		return json.Marshal(struct {
			*claimResult
			EventType string          `json:"event_type,omitempty"`
			Payload   json.RawMessage `json:"payload,omitempty"`
		}{e.result, e.eventType, payload})
	}
	r := e.ev.Request
	return json.Marshal(struct {
		IdempotencyKey string          `json:"idempotency_key"`
		Source         string          `json:"source"`
		EventID        string          `json:"event_id"`
		Action         string          `json:"action"`
		EventType      string          `json:"event_type,omitempty"`
		PayloadHash    string          `json:"payload_hash,omitempty"`
		ObjectID       string          `json:"object_id,omitempty"`
		ObjectVersion  *int64          `json:"object_version,omitempty"`
		Payload        json.RawMessage `json:"payload,omitempty"`
	}{claim.IdempotencyKey(r.Tenant, r.Key), r.Source, r.EventID, r.Action, e.eventType, r.PayloadHash,
		r.ObjectID, r.ObjectVersion, payload})
}

// triggerReceipt is one event in the body of the answer to the provider:
// never a claim token. The key expiry is the event's claim result's, as
// the ingest door's receipts carry it.
type triggerReceipt struct {
	EventID      string        `json:"event_id"`
	ClaimID      string        `json:"claim_id"`
	Outcome      claim.Outcome `json:"outcome"`
	KeyExpiresAt time.Time     `json:"key_expires_at"`
	KeyExpiry    string        `json:"key_expiry"`
}

// trigger is POST /v1/trigger/{source}. The call answers 200 whenever it
// decided the delivery, whatever the decision (the provider's delivery may
// be refused: that is a decision, not an error of the call); 404 for a
// source that is not the key's tenant's (unknown and another tenant's
// alike), 400/422/413 for a request that is not valid (nothing verified,
// nothing written), 503 when the claims could not be decided.
func (s *Server) trigger(c *fiber.Ctx) error {
	raw, err := s.bodyWithin(c, s.apiBodyLimit(c.Path()))
	if err != nil {
		return err
	}
	var b triggerBody
	if err := s.decode(raw, &b, ""); err != nil {
		return err
	}
	if err := b.checkHeaders(); err != nil {
		return err
	}
	if strings.ContainsRune(b.RequestID, 0) {
		return apperr.Field("request_id", "must not contain NUL characters")
	}
	if err := claim.CheckWorkflow(b.WorkflowID, b.WorkflowVersion); err != nil {
		return err
	}
	src := s.cfg.Inbox.TriggerSource(c.Params("source"))
	if src == nil || src.Tenant != tenant(c) {
		return apperr.New(apperr.NotFound, "no such source")
	}
	body, err := b.rawBody(src.MaxBodyBytes)
	if err != nil {
		if apperr.CodeOf(err) == apperr.TooLarge {
			s.cfg.Inbox.Observe(src.Name, string(apperr.TooLarge))
		}
		return err
	}
	if b.Method != fiber.MethodPost && slices.Contains(src.Methods, b.Method) {
		// The endpoint check of a provider that sends one (its
		// verify.Provider.Methods): decided by the source's rules as the
		// ingest door's GET and HEAD are, answered with the handshake
		// (HEAD: no body); it names no event and claims nothing.
		adm, err := s.admit(src, sources.Delivery{Method: b.Method, Header: b.header, RawQuery: b.Query, Body: body}, "trigger")
		if err != nil {
			return err
		}
		if adm.decision == "" { // sources.Source.Verify never lets one through
			return apperr.New(apperr.Invalid, "a %s request carries no event", b.Method)
		}
		if b.Method == fiber.MethodHead {
			adm.answer.body = nil
		}
		s.logTrigger(src, adm.decision, 0)
		return s.triggerAnswer(c, src, triggerReply{Decision: adm.decision, Events: []triggerEvent{}, Response: toTriggerResponse(adm.answer)})
	}
	if b.Method == fiber.MethodHead {
		// A reachability check some providers send when a webhook URL is
		// registered (Trello's HEAD, uptime probes): answered 200 with no
		// body, nothing verified, nothing written. It names no event.
		s.cfg.Inbox.Observe(src.Name, "handshake")
		return s.triggerAnswer(c, src, triggerReply{Decision: decisionHandshake, Events: []triggerEvent{},
			Response: toTriggerResponse(providerAnswer{status: fiber.StatusOK})})
	}
	if b.Method != fiber.MethodPost {
		// The ingest door takes POST only (the router answers 405).
		return s.triggerAnswer(c, src, triggerReply{Decision: decisionMethodNotAllowed, Events: []triggerEvent{},
			Response: toTriggerResponse(errorAnswer(apperr.New(apperr.MethodNotAllowed, "%s", transportMessage[apperr.MethodNotAllowed])))})
	}
	adm, err := s.admit(src, sources.Delivery{Header: b.header, RawQuery: b.Query, Body: body}, "trigger")
	if err != nil {
		return err
	}
	if adm.decision != "" {
		s.logTrigger(src, adm.decision, 0)
		return s.triggerAnswer(c, src, triggerReply{Decision: adm.decision, Events: []triggerEvent{}, Response: toTriggerResponse(adm.answer)})
	}
	events := adm.verified.Events
	if len(events) == 0 { // verifiers return at least one event; as the ingest door's Store
		return apperr.New(apperr.Invalid, "the delivery carries no event")
	}
	out := triggerReply{Events: make([]triggerEvent, len(events))}
	for i, ev := range events {
		out.Events[i] = triggerEvent{ev: ev, eventType: ev.Request.EventType}
	}
	if b.Test {
		out.Decision = decisionTest
		out.Response = toTriggerResponse(jsonAnswer(acceptedStatus(src),
			fiber.Map{"received": []any{}, "test": true, "rejected_items": adm.verified.Rejected}))
		if r := adm.verified.Reply; r != nil {
			// A test delivery is a real one from the provider (n8n's
			// test URL): it gets the answer the provider needs.
			out.Response = toTriggerResponse(handshakeAnswer(r))
		}
		s.logTrigger(src, out.Decision, len(events))
		return s.triggerAnswer(c, src, out)
	}
	// A signed one-time value (verify.Result.Nonce: Mailgun's token) is
	// recorded bound to these events before they are claimed; came
	// before with other events, the delivery is a replayed signature,
	// refused as unauthenticated with nothing claimed. The same events
	// again (a provider retry) go on to the claims: a duplicate.
	nctx, ncancel := s.ctx(c)
	err = s.cfg.Inbox.CheckNonce(nctx, src, adm.verified)
	ncancel()
	if err != nil {
		adm, err := s.refuse(src, err, "trigger")
		if err != nil {
			return err
		}
		s.logTrigger(src, adm.decision, 0)
		return s.triggerAnswer(c, src, triggerReply{Decision: adm.decision, Events: []triggerEvent{}, Response: toTriggerResponse(adm.answer)})
	}
	results, err := s.claimEvents(c, events, b)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	now := time.Now()
	receipts := make([]triggerReceipt, len(results))
	retryAfter := 0 // the soonest retry_after_seconds of an unfinished event
	for i, res := range results {
		cr := s.toClaimResult(ctx, res, now)
		out.Events[i].result = &cr
		receipts[i] = triggerReceipt{EventID: res.EventID, ClaimID: res.ID, Outcome: res.Outcome,
			KeyExpiresAt: cr.KeyExpiresAt, KeyExpiry: cr.KeyExpiry}
		if cr.RetryAfterSeconds != nil && (retryAfter == 0 || *cr.RetryAfterSeconds < retryAfter) {
			retryAfter = *cr.RetryAfterSeconds
		}
	}
	out.Decision = summarize(results)
	answer := jsonAnswer(acceptedStatus(src), fiber.Map{"received": receipts, "rejected_items": adm.verified.Rejected})
	if retryAfter > 0 {
		// An event another delivery holds, or whose retry is not yet due:
		// never 2xx, or the provider would not deliver it again.
		answer.status = fiber.StatusServiceUnavailable
		answer.header[fiber.HeaderRetryAfter] = strconv.Itoa(retryAfter)
	}
	if r := adm.verified.Reply; r != nil && allClaimedOrDuplicate(results) {
		// The provider's own answer for a taken delivery (Discord's
		// deferred interaction response): verify.Result.Reply.
		answer = handshakeAnswer(r)
	}
	out.Response = toTriggerResponse(answer)
	s.logTrigger(src, out.Decision, len(events))
	return s.triggerAnswer(c, src, out)
}

// allClaimedOrDuplicate reports whether every event of a delivery was won
// or is a duplicate of one already done: the delivery was taken, and a
// provider's own reply (verify.Result.Reply) may answer it. Any other
// outcome (in_progress, retry_later, conflict, stale, unknown,
// dead_lettered) keeps claimd's answer.
func allClaimedOrDuplicate(results []claim.Result) bool {
	for _, r := range results {
		if r.Outcome != claim.Won && r.Outcome != claim.Duplicate {
			return false
		}
	}
	return len(results) > 0
}

// claimEvents claims the events of one delivery: Claim for one, ClaimBatch
// for several (one transaction, group commit stays), through the Waiter
// when wait_seconds asks to wait. Each claim is the event's own request
// (source scope, key, event type, receipt hash, object) with the per-event
// request id; lease and lease policy are the source's.
func (s *Server) claimEvents(c *fiber.Ctx, events []sources.Event, b triggerBody) ([]claim.Result, error) {
	reqs := make([]claim.Request, len(events))
	for i, ev := range events {
		reqs[i] = ev.Request
		reqs[i].RequestID = requestID(b.RequestID, i)
		reqs[i].Shadow = b.Shadow
		reqs[i].WorkflowID, reqs[i].WorkflowVersion = b.WorkflowID, b.WorkflowVersion
	}
	wait := b.wait()
	waiting := wait > 0 && s.cfg.Waiter != nil
	if len(reqs) == 1 {
		var res claim.Result
		var err error
		if waiting {
			res, err = s.cfg.Waiter.Claim(c.UserContext(), reqs[0], wait)
		} else {
			ctx, cancel := s.ctx(c)
			defer cancel()
			res, err = s.cfg.Ledger.Claim(ctx, reqs[0])
		}
		if err != nil {
			return nil, err
		}
		return []claim.Result{res}, nil
	}
	for _, r := range reqs {
		if err := s.cfg.Ledger.Validate(r); err != nil {
			return nil, err
		}
	}
	if waiting {
		waits := make([]time.Duration, len(reqs))
		for i := range waits {
			waits[i] = wait
		}
		return s.cfg.Waiter.ClaimBatch(c.UserContext(), reqs, waits)
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	return s.cfg.Ledger.ClaimBatch(ctx, reqs)
}

// summarize is a delivery's decision from its events' claims: the first
// outcome of outcomeRank that any event has.
func summarize(results []claim.Result) decision {
	best := math.MaxInt
	for _, r := range results {
		for i, o := range outcomeRank {
			if r.Outcome == o && i < best {
				best = i
			}
		}
	}
	if best == math.MaxInt {
		return decision(results[0].Outcome)
	}
	return decision(outcomeRank[best])
}

// logTrigger logs a decided trigger delivery (never its body, a
// signature or a secret).
func (s *Server) logTrigger(src *sources.Source, d decision, events int) {
	s.cfg.Logger.Info().Str("source", src.Name).Str("decision", string(d)).Int("events", events).Msg("trigger delivery decided")
}
