package httpapi

import (
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// ingestDelivery is POST /ingest/{source}: the provider-facing endpoint.
// It verifies the raw body, stores the events with their dispatch jobs in
// one transaction and answers 2xx only after commit. Unauthenticated input
// creates nothing. Our own failures answer 503 so the provider retries.
func (s *Server) ingestDelivery(c *fiber.Ctx) error {
	src := s.cfg.Inbox.Source(c.Params("source"))
	if src == nil {
		// Answered exactly as a delivery that fails verification, so
		// that nobody can list the configured sources; its body is never
		// read.
		s.cfg.Logger.Warn().Str("source", clip(c.Params("source"), 64)).Msg("delivery for an unknown source")
		return s.unauthenticated(c, fiber.StatusUnauthorized)
	}
	if err := ingestEncoding(c); err != nil {
		s.cfg.Inbox.Observe(src.Name, "unsupported_encoding")
		return err
	}
	// The raw bytes as received (Fiber's c.Body() would decompress per
	// Content-Encoding, but signatures cover the bytes the provider
	// sent), within the source's own limit as loaded now.
	if err := s.readBody(c, src.MaxBodyBytes, s.ingestBodies); err != nil {
		if apperr.CodeOf(err) == apperr.TooLarge {
			// The same words as a body refused from its declared length,
			// and as an unknown source's: nothing names the source's limit.
			s.cfg.Inbox.Observe(src.Name, string(apperr.TooLarge))
			return apperr.New(apperr.TooLarge, "%s", declaredTooLarge)
		}
		return err
	}
	body := c.Request().Body()
	// A header the verifier or the key rule reads must have one value: a
	// header sent twice with different values (two X-GitHub-Delivery, two
	// webhook-id) names two events at once, so it reads as absent and the
	// delivery is refused below, never keyed by whichever came first.
	var repeated string
	hdr := verify.HeaderFunc(func(n string) string {
		vals := c.Request().Header.PeekAll(n)
		for _, v := range vals[min(len(vals), 1):] {
			if string(v) != string(vals[0]) {
				if repeated == "" {
					repeated = n
				}
				return ""
			}
		}
		return string(c.Request().Header.Peek(n))
	})
	res, err := src.Verifier.Verify(verify.Request{
		Header:   hdr,
		RawQuery: string(c.Request().URI().QueryString()),
		Body:     body,
	})
	if err := repeatedHeader(repeated, err); err != nil {
		return s.rejectDelivery(c, src, err)
	}
	if err != nil {
		return s.rejectDelivery(c, src, err)
	}
	if res.IsHandshake() {
		h := res.Handshake
		for k, vs := range h.Header {
			for _, v := range vs {
				c.Set(k, v)
			}
		}
		s.cfg.Inbox.Observe(src.Name, "handshake")
		return c.Status(h.Status).Send(h.Body)
	}
	for _, item := range res.Rejected {
		var verr *verify.Error
		if errors.As(item.Err, &verr) && verr.Authenticated && verr.Code != verify.CodeEventTypeNotAllowed {
			// An authentic item that cannot be stored: refuse the whole
			// delivery rather than acknowledge it with the item dropped.
			// (An item of a type the source filters out is left out by
			// configuration; the others are stored.)
			return s.rejectDelivery(c, src, item.Err)
		}
	}
	events, err := src.Identify(hdr, res.Events, body)
	if err := repeatedHeader(repeated, err); err != nil {
		return s.rejectDelivery(c, src, err)
	}
	if err != nil {
		return s.rejectDelivery(c, src, err)
	}
	headers := ingest.ForwardableHeaders(func(f func(name, value string)) {
		c.Request().Header.VisitAll(func(k, v []byte) { f(string(k), string(v)) })
	}, src.CredentialHeaders...)
	ctx, cancel := s.ctx(c)
	defer cancel()
	kept := body // readBody's own buffer, never reused by fasthttp
	if kept == nil {
		kept = []byte{} // never nil: an empty body is a body
	}
	receipts, err := s.cfg.Inbox.Receive(ctx, src, events, kept, string(c.Request().Header.ContentType()), headers)
	if err != nil {
		var verr *verify.Error
		if errors.As(err, &verr) { // an authentic body that cannot be hashed strictly
			return s.rejectDelivery(c, src, err)
		}
		return err
	}
	status := fiber.StatusOK
	if src.Provider == verify.TypeMSGraph {
		status = fiber.StatusAccepted // Microsoft Graph documents 202 Accepted
	}
	return c.Status(status).JSON(fiber.Map{"received": receipts, "rejected_items": len(res.Rejected)})
}

// rejectDelivery answers a delivery that failed verification, or that was
// authentic but cannot be stored as sent. The second kind is never
// answered 2xx (a provider that got a 2xx never sends the event again):
// it is refused with 422 not_stored naming the field, so the provider shows
// the error and retries. The one authentic delivery acknowledged without
// storing is an event type the source's allowed_event_types leaves out: the
// operator chose not to take it.
func (s *Server) rejectDelivery(c *fiber.Ctx, src *ingest.Source, err error) error {
	var verr *verify.Error
	if !errors.As(err, &verr) {
		return err
	}
	reason := string(verr.Code)
	s.cfg.Inbox.Observe(src.Name, reason)
	// Never the body, a signature or a secret: code, location and field only.
	ev := s.cfg.Logger.Warn()
	if verr.Authenticated && verr.Code != verify.CodeEventTypeNotAllowed {
		ev = s.cfg.Logger.Error() // an authentic event refused: someone must act
	}
	ev.Str("source", src.Name).Str("code", reason).Str("in", string(verr.In)).
		Str("field", verr.Field).Bool("authenticated", verr.Authenticated).Msg("delivery rejected")
	if verr.Authenticated {
		if verr.Code == verify.CodeEventTypeNotAllowed {
			return c.Status(fiber.StatusOK).JSON(fiber.Map{"received": []any{}, "filtered": verr.Reason})
		}
		return &apperr.Error{Code: apperr.NotStored, Field: verr.Field, Err: err,
			Message: verr.Reason + " (" + reason + "); the delivery is authentic but was not stored: " +
				"fix the sender's body or this source's key rule: until then every retry of it is refused the same way"}
	}
	return s.unauthenticated(c, src.UnauthenticatedStatus)
}

// unauthenticatedMessage is the one answer to a delivery that could not be
// authenticated, whatever the reason (no such source, no or a wrong
// signature, a stale timestamp): the reason is in claimd's log and the
// claimd_ingest_deliveries_total metric, never in the answer, so the
// answer tells an anonymous caller nothing (not even which sources exist).
const unauthenticatedMessage = "the delivery could not be authenticated; the reason is in claimd's log"

// unauthenticated answers a delivery that failed authentication with
// status (a source's unauthenticated_status; 401 for an unknown source)
// and closes the connection.
func (s *Server) unauthenticated(c *fiber.Ctx, status int) error {
	c.Response().SetConnectionClose()
	if status >= 200 && status < 300 {
		return c.SendStatus(status)
	}
	return c.Status(status).JSON(ErrorBody{ErrorDetail{Code: apperr.Unauthorized, Message: unauthenticatedMessage}})
}

// clip returns s cut to at most n bytes (for logging caller input).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// repeatedHeader is the refusal of a delivery that sent a header the
// verification or key rule read with two different values, or nil. err
// is the verification's own result: a request that failed verification
// for another reason first is refused as unauthenticated; an authentic
// one (or one the repetition made fail) names the header.
func repeatedHeader(name string, err error) error {
	if name == "" {
		return nil
	}
	var verr *verify.Error
	if err != nil && errors.As(err, &verr) && !verr.Authenticated && !strings.EqualFold(verr.Field, name) {
		return err
	}
	return &verify.Error{Code: verify.CodeMalformedHeader, In: verify.InHeader, Field: name,
		Reason: "header appears more than once with different values; it must name one event", Authenticated: err == nil || (verr != nil && verr.Authenticated)}
}

// ingestEncoding refuses a delivery sent with a Content-Encoding (415):
// signatures are checked over the bytes as sent, and the event is stored
// and forwarded as received, so a compressed body could only be verified
// against the wrong bytes or forwarded as something it is not. Only
// registered codings are named in the answer; nothing else of the header
// is echoed.
func ingestEncoding(c *fiber.Ctx) error {
	enc := strings.ToLower(strings.TrimSpace(c.Get(fiber.HeaderContentEncoding)))
	if enc == "" || enc == "identity" {
		return nil
	}
	name := "this Content-Encoding"
	switch enc {
	case "gzip", "x-gzip", "deflate", "br", "compress", "x-compress", "zstd":
		name = "Content-Encoding " + enc
	}
	return &apperr.Error{Code: apperr.UnsupportedEncoding, Field: fiber.HeaderContentEncoding,
		Message: name + " is not accepted on ingest: signatures are verified over the bytes as sent and " +
			"the event is stored and forwarded as received; send the body uncompressed (identity)"}
}

func (s *Server) inboxGet(c *fiber.Ctx) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	e, err := s.cfg.Inbox.Get(ctx, tenant(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(e)
}

func (s *Server) inboxReplay(c *fiber.Ctx) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	p, _ := c.Locals(principalKey).(auth.Principal)
	e, err := s.cfg.Inbox.ReplayAs(ctx, p.Tenant, c.Params("id"), "operator replay", p.KeyPrefix)
	if err != nil {
		return err
	}
	return c.JSON(e)
}
