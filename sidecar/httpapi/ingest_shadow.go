package httpapi

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Error codes of a shadow pass-through that got no answer from
// forward.url (the only answers of POST /ingest/{source} that are not
// claimd's own errors nor n8n's answer).
const (
	// codeBadGateway (502): forward.url could not be reached.
	codeBadGateway apperr.Code = "bad_gateway"
	// codeGatewayTimeout (504): forward.url did not answer within
	// forward.timeout_seconds.
	codeGatewayTimeout apperr.Code = "gateway_timeout"
)

// ingestShadow answers a verified delivery of an ingest door in shadow
// (shadow: true with forward.url; inbox.Inbox.Shadow): a signed one-time
// value seen before with other events is refused as the door refuses it
// (never forwarded); otherwise the events are claimed as shadow claims,
// the raw body is posted to forward.url and its answer relayed to the
// provider: its status, its Content-Type and Retry-After, and its body
// when at most inbox.MaxShadowReplyBytes (else none). When forward.url
// gives no answer the provider gets 504 gateway_timeout (none within
// forward.timeout_seconds) or 502 bad_gateway (not reachable), and
// retries as it would have after n8n's own failure. A ledger that
// cannot decide answers 503 before anything is forwarded.
func (s *Server) ingestShadow(c *fiber.Ctx, src *sources.Source, adm admission) error {
	nctx, ncancel := s.ctx(c)
	err := s.cfg.Inbox.CheckNonce(nctx, src, adm.verified)
	ncancel()
	if err != nil {
		adm, err := s.refuse(src, err, "ingest")
		if err != nil {
			return err
		}
		return sendAnswer(c, adm.answer)
	}
	header := http.Header{}
	c.Request().Header.VisitAll(func(k, v []byte) { header.Add(string(k), string(v)) })
	ans, err := s.cfg.Inbox.Shadow(c.UserContext(), src, inbox.ShadowDelivery{Events: adm.verified.Events,
		Body: c.Request().Body(), Header: header, ClaimTimeout: s.cfg.RequestTimeout})
	if err != nil {
		return err
	}
	decided := make([]string, len(ans.Results))
	for i, r := range ans.Results {
		decided[i] = string(r.WouldBe)
	}
	wouldBe := s.cfg.Logger.Info().Str("source", src.Name).Strs("would_be", decided)
	switch ans.Failure {
	case inbox.ShadowTimeout:
		wouldBe.Int("status", fiber.StatusGatewayTimeout).Msg("shadow delivery: forward.url did not answer in time")
		return sendAnswer(c, jsonAnswer(fiber.StatusGatewayTimeout, ErrorBody{ErrorDetail{Code: codeGatewayTimeout,
			Message: "the forward target did not answer within its timeout (shadow mode passes deliveries through); deliver again"}}))
	case inbox.ShadowUnreachable:
		wouldBe.Int("status", fiber.StatusBadGateway).Msg("shadow delivery: forward.url unreachable")
		return sendAnswer(c, jsonAnswer(fiber.StatusBadGateway, ErrorBody{ErrorDetail{Code: codeBadGateway,
			Message: "the forward target could not be reached (shadow mode passes deliveries through); deliver again"}}))
	}
	wouldBe.Int("status", ans.Status).Bool("body_dropped", ans.BodyDropped).Msg("shadow delivery passed through")
	a := providerAnswer{status: ans.Status, header: map[string]string{}, body: ans.Body}
	if ans.ContentType != "" {
		a.header[fiber.HeaderContentType] = ans.ContentType
	}
	if ans.RetryAfter != "" && sendableValue(ans.RetryAfter) {
		a.header[fiber.HeaderRetryAfter] = ans.RetryAfter
	}
	return sendAnswer(c, a)
}

// sendableValue reports whether v can be written as a header value: no
// control characters but horizontal tab.
func sendableValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}
