package httpapi

import (
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// ingestDelivery is POST /ingest/{source}: the provider-facing endpoint.
// It verifies the raw body, stores the events with their dispatch jobs in
// one transaction and answers 2xx only after commit. Unauthenticated input
// creates nothing. Our own failures answer 503 so the provider retries.
func (s *Server) ingestDelivery(c *fiber.Ctx) error {
	name := c.Params("source")
	src := s.cfg.Inbox.Source(name)
	if src == nil {
		return apperr.New(apperr.NotFound, "no ingest source %q", name)
	}
	// The raw bytes as received: Fiber's c.Body() would decompress per
	// Content-Encoding, but signatures cover the bytes the provider sent.
	body := c.Request().Body()
	if len(body) > src.MaxBodyBytes {
		s.cfg.Inbox.Observe(src.Name, "too_large")
		return apperr.New(apperr.TooLarge, "the body exceeds %d bytes, the limit of source %q", src.MaxBodyBytes, src.Name)
	}
	res, err := src.Verifier.Verify(verify.Request{
		Header:   verify.HeaderFunc(func(n string) string { return string(c.Request().Header.Peek(n)) }),
		RawQuery: string(c.Request().URI().QueryString()),
		Body:     body,
	})
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
	headers := ingest.ForwardableHeaders(func(f func(name, value string)) {
		c.Request().Header.VisitAll(func(k, v []byte) { f(string(k), string(v)) })
	}, src.CredentialHeaders...)
	ctx, cancel := s.ctx(c)
	defer cancel()
	kept := append([]byte(nil), body...) // fasthttp reuses the buffer after the handler
	receipts, err := s.cfg.Inbox.Receive(ctx, src, res.Events, kept, string(c.Request().Header.ContentType()), headers)
	if err != nil {
		return err
	}
	status := fiber.StatusOK
	if src.Provider == verify.TypeMSGraph {
		status = fiber.StatusAccepted // Microsoft Graph documents 202 Accepted
	}
	return c.Status(status).JSON(fiber.Map{"received": receipts, "rejected_items": len(res.Rejected)})
}

func (s *Server) rejectDelivery(c *fiber.Ctx, src *ingest.Source, err error) error {
	var verr *verify.Error
	if !errors.As(err, &verr) {
		return err
	}
	reason := string(verr.Code)
	s.cfg.Inbox.Observe(src.Name, reason)
	// Never the body, a signature or a secret: code, location and field only.
	s.cfg.Logger.Warn().Str("source", src.Name).Str("code", reason).Str("in", string(verr.In)).
		Str("field", verr.Field).Bool("authenticated", verr.Authenticated).Msg("delivery rejected")
	if verr.Authenticated {
		// Authentic but unusable (event type not allowed…): a retry cannot
		// change it, so acknowledge without storing anything.
		return c.Status(fiber.StatusOK).JSON(fiber.Map{"received": []any{}, "ignored": verr.Reason})
	}
	st := src.UnauthenticatedStatus
	if st >= 200 && st < 300 {
		return c.SendStatus(st)
	}
	return c.Status(st).JSON(ErrorBody{ErrorDetail{Code: apperr.Unauthorized, Message: verr.Error(), Field: verr.Field}})
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
	e, err := s.cfg.Inbox.Replay(ctx, tenant(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(e)
}
