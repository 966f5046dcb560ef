package httpapi

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// What a provider is answered, in one place for both doors of a source:
// POST /ingest/{source} sends it, POST /v1/trigger/{source} hands it to the
// n8n trigger node (its `response`), which sends it. admit runs the
// source's rules (sources.Source.Verify) and turns every way a delivery can
// end before its events are taken into a decision and that answer.

// decision is how one delivery was decided: before its events were taken
// (a handshake, a refusal, a filter) or, on POST /v1/trigger/{source}, by
// the claims of its events (a claim.Outcome).
type decision string

// Decisions that end a delivery before its events are taken. The claim
// outcomes (claim.Outcome) are the others.
const (
	// decisionHandshake: a provider handshake, answered as the verifier
	// says; nothing is taken.
	decisionHandshake decision = "handshake"
	// decisionUnauthenticated: verification failed; answered with the
	// source's unauthenticated_status and a body that says nothing of why.
	decisionUnauthenticated decision = "unauthenticated"
	// decisionNotStored: authentic, but cannot be taken as sent (422
	// not_stored naming the field): the provider must retry, never 2xx.
	decisionNotStored decision = "not_stored"
	// decisionFiltered: authentic, of a type allowed_event_types leaves
	// out; acknowledged with 200, nothing taken.
	decisionFiltered decision = "filtered"
	// decisionUnsupportedEncoding: a Content-Encoding other than identity
	// (415).
	decisionUnsupportedEncoding decision = "unsupported_encoding"
	// decisionMethodNotAllowed: a request method the ingest door does not
	// take (anything but POST; 405); nothing is verified.
	decisionMethodNotAllowed decision = "method_not_allowed"
	// decisionTest: POST /v1/trigger/{source} with test: verified and
	// keyed, nothing claimed or written.
	decisionTest decision = "test"
)

// providerAnswer is what claimd answers a provider for one delivery.
type providerAnswer struct {
	status int
	// header holds the response headers, Content-Type among them (none
	// for an empty 204).
	header map[string]string
	body   []byte
	// close: the connection is closed after the answer (an
	// unauthenticated delivery). Not part of the trigger's response.
	close bool
}

// admission is a delivery after its source's rules: either a decision
// already taken with the provider's answer, or its verified events.
type admission struct {
	decision decision // "" when the events are to be taken
	answer   providerAnswer
	verified sources.Verified
}

// admit runs src's rules over d (sources.Source.Verify). A delivery that
// ends there is a decision with its answer, counted in
// claimd_ingest_deliveries_total{result} and logged (code, location and
// field only: never the body, a signature or a secret); door names the
// route in the log ("ingest", "trigger"). Errors: only what is not a
// decision (none today: Verify fails with decisions only).
func (s *Server) admit(src *sources.Source, d sources.Delivery, door string) (admission, error) {
	v, err := src.Verify(d)
	if err != nil {
		return s.refuse(src, err, door)
	}
	if v.Handshake != nil {
		s.cfg.Inbox.Observe(src.Name, "handshake")
		return admission{decision: decisionHandshake, answer: handshakeAnswer(v.Handshake)}, nil
	}
	return admission{verified: v}, nil
}

// refuse is the decision on a delivery that failed its source's rules:
// an unsupported Content-Encoding (415), a delivery that could not be
// authenticated (the source's unauthenticated_status), or an authentic one
// that cannot be taken as sent. The second kind is never answered 2xx (a
// provider that got a 2xx never sends the event again): it is refused with
// 422 not_stored naming the field, so the provider shows the error and
// retries. The one authentic delivery acknowledged without taking it is an
// event type the source's allowed_event_types leaves out: the operator
// chose not to take it. Any other error is returned as it is.
func (s *Server) refuse(src *sources.Source, err error, door string) (admission, error) {
	if e := apperr.As(err); e != nil && e.Code == apperr.UnsupportedEncoding {
		s.cfg.Inbox.Observe(src.Name, string(apperr.UnsupportedEncoding))
		return admission{decision: decisionUnsupportedEncoding, answer: errorAnswer(e)}, nil
	}
	var verr *verify.Error
	if !errors.As(err, &verr) {
		return admission{}, err
	}
	reason := string(verr.Code)
	s.cfg.Inbox.Observe(src.Name, reason)
	// Never the body, a signature or a secret: code, location and field only.
	ev := s.cfg.Logger.Warn()
	if verr.Authenticated && verr.Code != verify.CodeEventTypeNotAllowed {
		ev = s.cfg.Logger.Error() // an authentic event refused: someone must act
	}
	ev.Str("source", src.Name).Str("door", door).Str("code", reason).Str("in", string(verr.In)).
		Str("field", verr.Field).Bool("authenticated", verr.Authenticated).Msg("delivery rejected")
	if !verr.Authenticated {
		return admission{decision: decisionUnauthenticated, answer: unauthenticatedAnswer(src.UnauthenticatedStatus)}, nil
	}
	if verr.Code == verify.CodeEventTypeNotAllowed {
		return admission{decision: decisionFiltered,
			answer: jsonAnswer(fiber.StatusOK, fiber.Map{"received": []any{}, "filtered": verr.Reason})}, nil
	}
	return admission{decision: decisionNotStored, answer: errorAnswer(&apperr.Error{Code: apperr.NotStored, Field: verr.Field,
		Message: verr.Reason + " (" + reason + "); the delivery is authentic but was not stored: " +
			"fix the sender's body or this source's key rule: until then every retry of it is refused the same way"})}, nil
}

// unauthenticatedMessage is the one answer to a delivery that could not be
// authenticated, whatever the reason (no such source, no or a wrong
// signature, a stale timestamp): the reason is in claimd's log and the
// claimd_ingest_deliveries_total metric, never in the answer, so the
// answer tells an anonymous caller nothing (not even which sources exist).
const unauthenticatedMessage = "the delivery could not be authenticated; the reason is in claimd's log"

// unauthenticatedAnswer answers a delivery that failed authentication with
// status (a source's unauthenticated_status; 401 for an unknown source):
// the error JSON with unauthenticatedMessage, or for a 2xx the status text
// as text/plain (nothing for 204); the connection is closed.
func unauthenticatedAnswer(status int) providerAnswer {
	if status >= 200 && status < 300 {
		if status == fiber.StatusNoContent {
			return providerAnswer{status: status, header: map[string]string{}, body: []byte{}, close: true}
		}
		return providerAnswer{status: status, header: map[string]string{fiber.HeaderContentType: fiber.MIMETextPlainCharsetUTF8},
			body: []byte(utils.StatusMessage(status)), close: true}
	}
	a := jsonAnswer(status, ErrorBody{ErrorDetail{Code: apperr.Unauthorized, Message: unauthenticatedMessage}})
	a.close = true
	return a
}

// handshakeAnswer is the verifier's handshake answer: its status, its
// headers (several values of one joined with ", ") and its exact body.
func handshakeAnswer(h *verify.Handshake) providerAnswer {
	a := providerAnswer{status: h.Status, header: make(map[string]string, len(h.Header)), body: h.Body}
	for k, vs := range h.Header {
		a.header[k] = strings.Join(vs, ", ")
	}
	if a.body == nil {
		a.body = []byte{}
	}
	return a
}

// errorAnswer is e's answer as every route gives it (handleError): the
// status of e.Code in errorStatus and the error JSON.
func errorAnswer(e *apperr.Error) providerAnswer {
	return jsonAnswer(errorStatus[e.Code], ErrorBody{ErrorDetail{Code: e.Code, Message: e.Message, Field: e.Field}})
}

// jsonAnswer is v as JSON with status, encoded as Fiber's c.JSON encodes
// it (encoding/json).
func jsonAnswer(status int, v any) providerAnswer {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own types are answered; none fails to encode.
		panic("httpapi: answer does not encode: " + err.Error())
	}
	return providerAnswer{status: status, header: map[string]string{fiber.HeaderContentType: fiber.MIMEApplicationJSON}, body: b}
}

// sendAnswer writes a to the provider's connection.
func sendAnswer(c *fiber.Ctx, a providerAnswer) error {
	keys := make([]string, 0, len(a.header))
	for k := range a.header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Set(k, a.header[k])
	}
	if a.close {
		c.Response().SetConnectionClose()
	}
	return c.Status(a.status).Send(a.body)
}

// acceptedStatus is the 2xx a source's provider expects for a delivery
// whose events were taken: its registered verify.Provider.AcceptedStatus
// (202 for Microsoft Graph), 200 when it names none.
func acceptedStatus(src *sources.Source) int {
	if p, ok := verify.Lookup(src.Provider); ok && p.AcceptedStatus != 0 {
		return p.AcceptedStatus
	}
	return fiber.StatusOK
}

// outcomeRank orders claim outcomes for a delivery's decision: the first
// that any of its events has. won first (an execution must run), then
// in_progress and retry_later (the provider must deliver again), then
// conflict (reported, never a routine duplicate), unknown and
// dead_lettered (an operator must act), stale, duplicate.
var outcomeRank = []claim.Outcome{claim.Won, claim.InProgress, claim.RetryLater, claim.Conflict,
	claim.Unknown, claim.DeadLettered, claim.Stale, claim.Duplicate}
