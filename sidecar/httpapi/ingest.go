package httpapi

import (
	"slices"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// ingestDelivery is POST /ingest/{source}: the provider-facing endpoint.
// It runs the source's rules (admit: the same as POST /v1/trigger/{source}
// runs), stores the events with their dispatch jobs in one transaction and
// answers 2xx only after commit. Unauthenticated input creates nothing.
// Our own failures answer 503 so the provider retries. A trigger source
// (no forward target) is no ingest door: it is answered as an unknown
// source. A source in shadow passes a verified delivery through to its
// forward target instead (ingestShadow).
func (s *Server) ingestDelivery(c *fiber.Ctx) error {
	src := s.cfg.Inbox.Source(c.Params("source"))
	if src == nil {
		// Answered exactly as a delivery that fails verification, so
		// that nobody can list the configured sources; its body is never
		// read.
		s.cfg.Logger.Warn().Str("source", clip(c.Params("source"), 64)).Msg("delivery for an unknown source")
		return sendAnswer(c, unauthenticatedAnswer(fiber.StatusUnauthorized))
	}
	adm, err := s.readAndAdmit(c, src, "")
	if err != nil {
		return err
	}
	if adm.decision != "" {
		return sendAnswer(c, adm.answer)
	}
	if src.Shadow {
		// Observe only: passed through to forward.url, nothing stored.
		return s.ingestShadow(c, src, adm)
	}
	// Never the query string, nor a credential query parameter a header
	// repeats (StoredHeaders).
	headers := inbox.StoredHeaders(src, func(f func(name, value string)) {
		c.Request().Header.VisitAll(func(k, v []byte) { f(string(k), string(v)) })
	})
	ctx, cancel := s.ctx(c)
	defer cancel()
	receipts, err := s.cfg.Inbox.Store(ctx, src, adm.verified.Events, adm.verified.Nonce, headers)
	if err != nil {
		// A replayed signed one-time value (verify.Result.Nonce) is
		// refused as a bad signature; anything else is returned as it is.
		adm, err := s.refuse(src, err, "ingest")
		if err != nil {
			return err
		}
		return sendAnswer(c, adm.answer)
	}
	if r := adm.verified.Reply; r != nil && allTaken(receipts) {
		// The provider's own answer for a taken delivery (Discord's
		// deferred interaction response): verify.Result.Reply.
		return sendAnswer(c, handshakeAnswer(r))
	}
	return c.Status(acceptedStatus(src)).JSON(fiber.Map{"received": receipts, "rejected_items": adm.verified.Rejected})
}

// allTaken reports whether every receipt of a delivery is accepted (stored
// now) or a duplicate of an event stored before: the delivery was taken,
// and a provider's own reply (verify.Result.Reply) may answer it. A
// conflict keeps claimd's receipt, which names it.
func allTaken(receipts []inbox.Receipt) bool {
	for _, r := range receipts {
		if r.Status != inbox.Accepted && r.Status != inbox.Duplicate {
			return false
		}
	}
	return len(receipts) > 0
}

// ingestHandshake is GET and HEAD on /ingest/{source}: the endpoint check
// of a provider that sends one (its verify.Provider.Methods: a GET
// challenge, a HEAD reachability check). The request goes through the edge
// like a POST (limits, framing, connections: the edge goes by path) and
// through the source's rules with its method (admit), and is answered with
// the provider's handshake (HEAD: its status and headers, no body) or
// refused as a POST would be. Nothing is stored: such a request never
// carries an event. For a source whose provider sends no such method, and
// for an unknown source, the answer is the router's 405, as before any
// provider needed one, so the method tells nobody which sources exist.
func (s *Server) ingestHandshake(c *fiber.Ctx) error {
	method := c.Method()
	src := s.cfg.Inbox.Source(c.Params("source"))
	if src == nil || !slices.Contains(src.Methods, method) {
		return fiber.ErrMethodNotAllowed
	}
	adm, err := s.readAndAdmit(c, src, method)
	if err != nil {
		return err
	}
	if adm.decision == "" { // sources.Source.Verify never lets one through
		return apperr.New(apperr.Invalid, "a %s request carries no event", method)
	}
	return sendAnswer(c, adm.answer) // fasthttp sends no body to a HEAD
}

// readAndAdmit is what a POST and a handshake on /ingest/{source} share:
// the Content-Encoding check before the body is read (a compressed body is
// refused unread), the raw body as received within the source's own limit
// (Fiber's c.Body() would decompress per Content-Encoding, but signatures
// cover the bytes the provider sent), and the source's rules (admit) with
// method ("" for POST). An admission with a decision is the answer to
// send; one without is a verified delivery.
func (s *Server) readAndAdmit(c *fiber.Ctx, src *sources.Source, method string) (admission, error) {
	if err := sources.CheckEncoding(headerValues(c, fiber.HeaderContentEncoding)); err != nil {
		return s.refuse(src, err, "ingest")
	}
	if err := s.readBody(c, src.MaxBodyBytes, s.ingestBodies); err != nil {
		if apperr.CodeOf(err) == apperr.TooLarge {
			// The same words as a body refused from its declared length,
			// and as an unknown source's: nothing names the source's limit.
			s.cfg.Inbox.Observe(src.Name, string(apperr.TooLarge))
			return admission{}, apperr.New(apperr.TooLarge, "%s", declaredTooLarge)
		}
		return admission{}, err
	}
	return s.admit(src, sources.Delivery{
		Method:   method,
		Header:   func(name string) []string { return headerValues(c, name) },
		RawQuery: string(c.Request().URI().QueryString()),
		Body:     c.Request().Body(), // readBody's own buffer, never reused by fasthttp
	}, "ingest")
}

// headerValues returns every value of the request header name, in
// arrival order, as copies (fasthttp's buffers are reused after the
// request).
func headerValues(c *fiber.Ctx, name string) []string {
	vals := c.Request().Header.PeekAll(name)
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out
}

// clip returns s cut to at most n bytes (for logging caller input).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
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
