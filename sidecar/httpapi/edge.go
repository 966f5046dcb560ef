package httpapi

// The edge: what claimd does with a request before any route handler sees
// it, and what an unauthenticated caller can make it spend.
//
//   - Framing (RFC 9112): every connection passes a parser of HTTP/1.1
//     message framing before fasthttp reads a byte (framing.go,
//     Server.Listener): header lines end in CRLF; a field line has a
//     colon after a token name, no whitespace before the colon, no
//     obsolete line folding and no control byte but HTAB in its value;
//     Content-Length is one decimal number (repeated only with the same
//     value) and never comes with Transfer-Encoding, which is only
//     "chunked" and never on HTTP/1.0; an HTTP/1.1 request has exactly one
//     Host; a chunked body is exactly RFC 9112's grammar (hex chunk-size,
//     chunk-ext with whitespace only around ';' and '=', CRLF after every
//     line and chunk, trailer fields by the header rules), its chunk-ext
//     and trailer section bounded. A request that breaks any of these is
//     answered 400 bad_request at once and its connection closed: a
//     request behind it is never parsed. fasthttp parses chunked bodies
//     and some of these header blocks leniently (a bare LF or a control
//     byte after a chunk size is skipped, a line without a colon waits for
//     more), so claimd checks the raw bytes itself; checkFraming applies
//     the header rules again to the parsed block (headerReceived).
//   - Bodies are streamed (fiber.Config.StreamRequestBody): fasthttp reads
//     the headers and at most 8 KiB of the body before the router runs.
//     Each route reads the rest itself (readBody), within its own limit
//     (/v1: CLAIMD_BODY_LIMIT_BYTES, POST /v1/trigger/{source} at least
//     the base64 of the largest max_body_bytes plus its envelope, see
//     apiBodyLimit; /ingest/{source}: that source's max_body_bytes, as
//     reloaded), after what it can check without the
//     body: the API key on /v1, the source's existence on /ingest. A
//     declared length past the limit is refused before a byte is read.
//   - Bodies held at once are bounded per route class by a byte budget
//     (CLAIMD_API_BODY_BYTES_IN_FLIGHT, CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT).
//     A /v1 or console body (read after its API key was checked, or
//     small) reserves its declared length (its route's limit when chunked,
//     at most the whole budget) before it is read and keeps it until the
//     answer is written; one that finds no room within
//     CLAIMD_REQUEST_TIMEOUT_SECONDS is answered 503 with Retry-After.
//     Ingest bodies come before any authentication, so they have a budget
//     of their own and can never starve the API's; there a body holds only
//     the bytes that arrived, must keep arriving at a minimum rate, and
//     each address and source holds at most its share (ingestBudget).
//   - Connections are bounded in all and per client address by claimd's
//     own listener (Server.Listener, connlimit.go): a refused connection
//     is answered in the API's JSON error shape with Retry-After.
//   - A request whose body was not read to its end (refused before it)
//     closes its connection, so the unread bytes are never parsed as the
//     next request.
//   - While claimd shuts down, every new request, including one on a
//     kept-alive connection, is answered 503 with Retry-After and
//     Connection: close (Drain); at the hard deadline the requests still
//     running have their context cancelled (Abort).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/console"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// byteBudget bounds the request-body bytes one route class holds at once.
type byteBudget struct {
	sem  *semaphore.Weighted
	size int64
	// reserved is what the bodies being read or held reserved; received
	// what of it has arrived (claimd_http_body_bytes{kind}).
	reserved, received atomic.Int64
	// arrived, when set, replaces sem: bodies hold what arrived, within
	// shares and a minimum rate (the ingest budget).
	arrived *ingestBudget
}

func newByteBudget(size int64) *byteBudget {
	return &byteBudget{sem: semaphore.NewWeighted(size), size: size}
}

// countingReader adds what it reads to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
	// total is what this reader added.
	total int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	c.total += int64(k)
	return k, err
}

// bodyState is the request's body as the edge knows it (c.Locals).
type bodyState struct {
	// read: the body was read to its end (or there was none).
	read bool
	// dropped: headerReceived left the body unread (verdictUnread).
	dropped bool
	// budget, reserved and received: what readBody reserved and read,
	// released by edge.
	budget             *byteBudget
	reserved, received int64
	// heavy: the request holds a slot of this semaphore (heavyBody).
	heavy *semaphore.Weighted
	// hold is the body's share of the ingest budget, released by edge.
	hold *bodyHold
}

const bodyStateKey ctxKey = 100

func bodyStateOf(c *fiber.Ctx) *bodyState {
	st, _ := c.Locals(bodyStateKey).(*bodyState)
	return st
}

// errDraining answers every request that arrives while claimd shuts down.
var errDraining = apperr.New(apperr.Unavailable, "claimd is shutting down; retry the request (it reaches another replica, or this one once it has restarted)")

// refuseHeader carries headerReceived's verdict on a request to edge. Any
// value a client sends under this name is deleted first.
const refuseHeader = "X-Claimd-Edge-Refusal"

// Verdicts of headerReceived (values of refuseHeader).
const (
	// verdictFraming: checkFraming refused the request.
	verdictFraming = "framing"
	// verdictTooLarge: the declared body exceeds the route's limit.
	verdictTooLarge = "too_large"
	// verdictUnread: the route refuses the request from its headers (no
	// API key on /v1, an unknown source on /ingest), so the body is
	// never read.
	verdictUnread = "unread"
)

// headerReceived runs in fasthttp once a request's headers are parsed and
// before any byte of its body is read (fasthttp.Server.HeaderReceived).
// A request it refuses gets its Content-Length set to 0, so fasthttp reads
// no body and hands it on at once, and a verdict edge answers: framing
// (checkFraming, or a protocol other than HTTP/1.0 and HTTP/1.1), a
// declared body over its route's limit, or a body its route will refuse
// unread. Everything else is left as it came; fasthttp then reads at most
// min(Content-Length, 8 KiB) of the body before routing.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	h.Del(refuseHeader)
	verdict := ""
	declared := h.ContentLength()
	if reason := checkFraming(h.RawHeaders(), h.IsHTTP11()); reason != "" {
		verdict = verdictFraming
		s.cfg.Logger.Warn().Str("reason", reason).Msg("request refused: ambiguous or malformed framing")
	} else if p := string(h.Protocol()); p != "HTTP/1.1" && p != "HTTP/1.0" {
		verdict = verdictFraming
		s.cfg.Logger.Warn().Str("reason", "protocol is neither HTTP/1.1 nor HTTP/1.0").Msg("request refused: ambiguous or malformed framing")
	} else if declared > 0 || declared == -1 {
		path, _, _ := strings.Cut(string(h.RequestURI()), "?")
		switch lower := strings.ToLower(path); {
		case strings.HasPrefix(lower, "/v1/") || lower == "/v1":
			scheme, _, _ := strings.Cut(string(h.Peek(fiber.HeaderAuthorization)), " ")
			if !strings.EqualFold(scheme, "Bearer") {
				verdict = verdictUnread
			} else if declared > s.apiBodyLimit(path) {
				verdict = verdictTooLarge
			}
		case (strings.HasPrefix(lower, console.Prefix+"/") || lower == console.Prefix) && s.cfg.Console != nil:
			if declared > console.BodyLimit {
				verdict = verdictTooLarge
			}
		case strings.HasPrefix(lower, "/ingest/") && s.cfg.Inbox != nil:
			// An unknown source is answered as a source of the default
			// limit would be (413 past it, else as unauthenticated), so
			// that the size of a body does not tell the two apart.
			limit := sources.DefaultMaxBodyBytes
			src := s.cfg.Inbox.Source(strings.TrimSuffix(path[len("/ingest/"):], "/"))
			if src != nil {
				limit = src.MaxBodyBytes
			}
			switch {
			case declared > limit:
				verdict = verdictTooLarge
			case src == nil:
				verdict = verdictUnread
			}
		}
	}
	if verdict != "" {
		// A small body over its limit is kept to be read and discarded
		// (edge), so that a client still sending it reads the 413 rather
		// than a reset connection; any other refused body is never read.
		if declared != 0 && !(verdict == verdictTooLarge && declared > 0 && declared <= drainLimit) {
			h.SetContentLength(0)
		}
		h.Set(refuseHeader, verdict)
	}
	return fasthttp.RequestConfig{}
}

// drainLimit is the largest declared body, in bytes, that is read and
// discarded before a 413 (net/http's server does the same for 256 KiB).
const drainLimit = 256 << 10

// methodGuard wraps fasthttp's handler (Fiber's router) so that a request
// whose method Fiber does not know is answered like any other refusal
// (405 method_not_allowed, JSON, connection closed) instead of Fiber's
// plain-text answer.
func (s *Server) methodGuard(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	body, _ := json.Marshal(ErrorBody{ErrorDetail{Code: apperr.MethodNotAllowed, Message: transportMessage[apperr.MethodNotAllowed]}})
	framing, _ := json.Marshal(ErrorBody{ErrorDetail{Code: apperr.BadRequest, Message: transportMessage[apperr.BadRequest]}})
	return func(ctx *fasthttp.RequestCtx) {
		if !slices.Contains(fiber.DefaultMethods, string(ctx.Method())) {
			ctx.Response.Header.SetContentType(fiber.MIMEApplicationJSON)
			ctx.Response.SetConnectionClose()
			if framingRefused(ctx) { // its body is malformed: framing first, as on every route
				ctx.Response.SetStatusCode(fiber.StatusBadRequest)
				ctx.Response.SetBody(framing)
				return
			}
			s.cfg.Logger.Warn().Str("code", string(apperr.MethodNotAllowed)).Msg("request refused: unknown method")
			ctx.Response.SetStatusCode(fiber.StatusMethodNotAllowed)
			ctx.Response.SetBody(body)
			return
		}
		next(ctx)
	}
}

// edge is the first handler of every request: shutdown, headerReceived's
// verdict, the request's base context, and afterwards the body budget and
// whether the connection may be kept.
func (s *Server) edge(c *fiber.Ctx) error {
	st := &bodyState{}
	c.Locals(bodyStateKey, st)
	c.SetUserContext(s.base)
	verdict := string(c.Request().Header.Peek(refuseHeader))
	if framingRefused(c.Context()) {
		verdict = verdictFraming
	}
	defer func() {
		if st.heavy != nil {
			st.heavy.Release(1)
			st.heavy = nil
		}
		if st.hold != nil {
			s.ingestBodies.arrived.release(st.hold)
			st.hold = nil
		}
		if st.reserved > 0 {
			st.budget.received.Add(-st.received)
			st.budget.reserved.Add(-st.reserved)
			st.budget.sem.Release(st.reserved)
			st.reserved, st.received = 0, 0
		}
		if verdict != "" || !st.read && hasBody(c) || s.draining.Load() {
			c.Response().SetConnectionClose()
		}
	}()
	if s.draining.Load() {
		// A request that arrived during the drain is refused; a small
		// body is read and discarded first, as before a 413, so that a
		// client still sending it reads the 503 rather than a reset
		// connection. The read ends at CLAIMD_READ_TIMEOUT_SECONDS at the
		// latest, and the process does not wait for it past the
		// shutdown's deadline.
		// (headerReceived left the length of no other refused body.)
		if hasBody(c) {
			_, _ = io.Copy(io.Discard, io.LimitReader(c.Context().RequestBodyStream(), drainLimit))
		}
		return errDraining
	}
	switch verdict {
	case "":
	case verdictFraming:
		return apperr.New(apperr.BadRequest, "%s", transportMessage[apperr.BadRequest])
	case verdictTooLarge:
		if hasBody(c) { // at most drainLimit bytes (headerReceived); errors end it, the answer is the same
			_, _ = io.Copy(io.Discard, c.Context().RequestBodyStream())
		}
		return apperr.New(apperr.TooLarge, "%s", declaredTooLarge)
	default:
		st.dropped = true
	}
	return c.Next()
}

// readBody reads the request body to its end within limit bytes and the
// byte budget b, and makes it the request's body (c.Request().Body()).
// Errors: TooLarge past limit (declared or read), Unavailable when b has
// no room within the request timeout, RequestTimeout when the body does
// not arrive within the read timeout, BadRequest for a body that ends
// before its Content-Length or a malformed chunked encoding.
func (s *Server) readBody(c *fiber.Ctx, limit int, b *byteBudget) error {
	st := bodyStateOf(c)
	if st == nil || st.read {
		return nil
	}
	if st.dropped {
		return apperr.New(apperr.BadRequest, "the request was refused before its body was read")
	}
	req := c.Request()
	declared := req.Header.ContentLength()
	if declared == 0 || declared == -2 {
		st.read = true
		return nil
	}
	if declared > limit {
		return tooLarge(limit)
	}
	if b.arrived != nil {
		return s.readArrivingBody(c, limit, b.arrived)
	}
	want := int64(limit)
	if declared > 0 {
		want = int64(declared)
	}
	want = min(want, b.size)
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.RequestTimeout)
	err := b.sem.Acquire(ctx, want)
	cancel()
	if err != nil {
		return apperr.New(apperr.Unavailable, "too many request bodies are being received at once; retry")
	}
	st.budget, st.reserved = b, want
	b.reserved.Add(want)
	stream := &countingReader{r: c.Context().RequestBodyStream(), n: &b.received}
	defer func() { st.received = stream.total }()
	var body []byte
	if declared > 0 {
		body = make([]byte, declared)
		_, err = io.ReadFull(stream, body)
	} else {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(io.LimitReader(stream, int64(limit)+1))
		body = buf.Bytes()
		if err == nil && len(body) > limit {
			return tooLarge(limit)
		}
	}
	if err != nil {
		return bodyReadError(err)
	}
	st.read = true
	req.SetBodyRaw(body)
	return s.takeHeavy(c, st, len(body))
}

// takeHeavy takes a slot of s.heavy for a body of n bytes from heavyBody
// on, within the request timeout.
func (s *Server) takeHeavy(c *fiber.Ctx, st *bodyState, n int) error {
	if n >= heavyBody {
		// Decoding, verifying and hashing a large body is CPU work: at
		// most GOMAXPROCS such requests at once, waiting within the
		// request timeout, so that a burst of large bodies is queued
		// instead of slowing every request down.
		ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.RequestTimeout)
		err := s.heavy.Acquire(ctx, 1)
		cancel()
		if err != nil {
			return apperr.New(apperr.Unavailable, "too many large request bodies are being processed at once; retry")
		}
		st.heavy = s.heavy
	}
	return nil
}

// readArrivingBody is readBody within an ingest budget: the body holds
// what arrived, at the minimum rate, within its address's and source's
// shares (see ingestBudget). Errors as readBody's; a body cut for its rate
// or preempted is RequestTimeout.
func (s *Server) readArrivingBody(c *fiber.Ctx, limit int, b *ingestBudget) error {
	st := bodyStateOf(c)
	req := c.Request()
	declared := req.Header.ContentLength()
	fc := c.Context()
	hard := fc.Time().Add(s.cfg.ReadTimeout)
	h := &bodyHold{addr: addressGroup(fc.RemoteIP()), source: c.Params("source"), start: time.Now(), conn: fc.Conn(),
		want: int64(declared), hard: hard}
	b.open(h)
	st.hold = h
	r := &ingestReader{r: fc.RequestBodyStream(), b: b, h: h, hard: hard,
		wait: s.cfg.RequestTimeout, base: c.UserContext()}
	// The buffer grows with what arrives, never to a declared length
	// that has not.
	var buf bytes.Buffer
	buf.Grow(min(max(declared, 0), 64<<10))
	most := int64(limit) + 1
	if declared > 0 {
		most = int64(declared)
	}
	_, err := buf.ReadFrom(io.LimitReader(r, most))
	body := buf.Bytes()
	switch {
	case err == nil && declared > 0 && len(body) < declared:
		err = io.ErrUnexpectedEOF
	case err == nil && declared < 0 && len(body) > limit:
		return tooLarge(limit)
	}
	if err != nil {
		var ae *apperr.Error
		if errors.As(err, &ae) {
			return ae
		}
		rerr := bodyReadError(err)
		if r.slow && !h.cancelled.Load() && apperr.CodeOf(rerr) == apperr.RequestTimeout {
			b.slow.Add(1)
		}
		return rerr
	}
	b.finish(h)
	st.read = true
	req.SetBodyRaw(body)
	return s.takeHeavy(c, st, len(body))
}

// heavyBody is the body size, in bytes, from which a request takes one of
// the GOMAXPROCS slots of Server.heavy until it is answered.
const heavyBody = 256 << 10

func tooLarge(limit int) error {
	return apperr.New(apperr.TooLarge, "the request body exceeds %d bytes, the limit of this route", limit)
}

// bodyReadError is the answer to a body that could not be read: never the
// reader's message, which may quote the bytes sent.
func bodyReadError(err error) error {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return &apperr.Error{Code: apperr.RequestTimeout, Message: "the request body did not arrive in time", Err: err}
	}
	return &apperr.Error{Code: apperr.BadRequest, Err: err,
		Message: "the request body ended early or its chunked encoding is malformed"}
}

// checkFraming returns why the raw header block of a request (as
// fasthttp's RawHeaders gives it: the header lines after the request
// line, each ending in CRLF, then the empty line) makes the request's
// framing ambiguous or malformed, or "". The reasons are fixed texts,
// never a header value. Rules, RFC 9112: a field line ends in CRLF (a
// bare CR or LF is refused, section 2.2); no obsolete line folding
// (section 5.2); a field line has a colon, and its name is a token with
// no whitespace before the colon (section 5.1); a field value holds no
// control character other than HTAB (RFC 9110 section 5.5: NUL, CR and LF
// are invalid, the other CTLs are refused as a recipient may); Content-Length
// is one decimal number, repeated only with the same value (section 6.3
// item 5; RFC 9110 section 8.6); Transfer-Encoding never with
// Content-Length (section 6.3 item 3), never on HTTP/1.0 (section 6.1),
// and only "chunked" (claimd decodes no other coding, so any other list is
// refused rather than guessed); exactly one Host on HTTP/1.1 (section
// 3.2). The framing check on the connection (framing.go) applies the same
// rules line by line as the bytes arrive.
func checkFraming(raw []byte, http11 bool) string {
	t := fieldTally{http11: http11}
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return "header block not terminated"
		}
		line := raw[:i]
		raw = raw[i+1:]
		if len(line) == 0 || line[len(line)-1] != '\r' {
			return "header line ends in a bare LF"
		}
		line = line[:len(line)-1]
		if len(line) == 0 {
			break // the empty line that ends the headers
		}
		if reason := t.field(line); reason != "" {
			return reason
		}
	}
	return t.end()
}

// fieldTally checks the field lines of one header block, one at a time,
// and keeps what the rules over the whole block need.
type fieldTally struct {
	http11 bool
	// length is the Content-Length (when lengths > 0).
	length                    int64
	lengths, encodings, hosts int
	chunked                   bool
}

// field checks one field line (without its CRLF) and counts it; it
// returns why the line is refused, or "".
func (t *fieldTally) field(line []byte) string {
	name, value, reason := checkFieldLine(line)
	if reason != "" {
		return reason
	}
	switch {
	case asciiEqualFold(name, "content-length"):
		for rest, more := value, true; more; {
			var v []byte
			v, rest, more = bytes.Cut(rest, []byte{','})
			v = bytes.Trim(v, " \t")
			if !isDecimal(v) {
				return "Content-Length is not a decimal number"
			}
			n := int64(0) // 18 digits at most: no overflow
			for _, ch := range v {
				n = n*10 + int64(ch-'0')
			}
			if t.lengths > 0 && n != t.length {
				return "two different Content-Length values"
			}
			t.length = n
			t.lengths++
		}
	case asciiEqualFold(name, "transfer-encoding"):
		t.encodings++
		if t.encodings > 1 || !asciiEqualFold(value, "chunked") {
			return "Transfer-Encoding other than chunked"
		}
		t.chunked = true
	case asciiEqualFold(name, "host"):
		t.hosts++
	}
	return ""
}

// end applies the rules over the whole block once its last line was
// counted; it returns why the block is refused, or "".
func (t *fieldTally) end() string {
	switch {
	case t.encodings > 0 && t.lengths > 0:
		return "Content-Length together with Transfer-Encoding"
	case t.chunked && !t.http11:
		return "Transfer-Encoding on an HTTP/1.0 request"
	case t.http11 && t.hosts != 1:
		return "an HTTP/1.1 request needs exactly one Host header"
	}
	return ""
}

// checkFieldLine checks one field line of a header or trailer section
// (without its CRLF): no obsolete line folding, a colon after a non-empty
// token name, no control character but HTAB in the value. It returns the
// name, the value without the whitespace around it, and why the line is
// refused or "".
func checkFieldLine(line []byte) (name, value []byte, reason string) {
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, "bare CR in a header line"
	}
	if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		return nil, nil, "obsolete line folding"
	}
	colon := bytes.IndexByte(line, ':')
	switch {
	case colon < 0:
		return nil, nil, "header line without a colon"
	case colon == 0:
		return nil, nil, "header line without a field name"
	}
	name = line[:colon]
	for _, ch := range name {
		if !isTokenChar(ch) {
			return nil, nil, "field name is not a token"
		}
	}
	value = line[colon+1:]
	for _, ch := range value {
		if isFieldCTL(ch) {
			return nil, nil, "control character in a field value"
		}
	}
	return name, bytes.Trim(value, " \t"), ""
}

// isTokenChar reports whether ch is a tchar of RFC 9110 section 5.6.2.
func isTokenChar(ch byte) bool { return byteClass[ch]&classToken != 0 }

// isFieldCTL reports whether ch is a control character a field value may
// not hold: any CTL but HTAB (RFC 9110 section 5.5).
func isFieldCTL(ch byte) bool { return byteClass[ch]&classCTL != 0 }

// Byte classes (byteClass): a table lookup per byte keeps the framing
// check cheap.
const (
	classToken = 1 << iota
	classCTL
)

var byteClass = func() (t [256]uint8) {
	for ch := range 256 {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', strings.IndexByte("!#$%&'*+-.^_`|~", byte(ch)) >= 0:
			t[ch] |= classToken
		case ch < ' ' && ch != '\t', ch == 0x7f:
			t[ch] |= classCTL
		}
	}
	return t
}()

// isDecimal: 1 to 18 ASCII digits (fits an int64 with room).
func isDecimal(v []byte) bool {
	if len(v) == 0 || len(v) > 18 {
		return false
	}
	for _, ch := range v {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range len(b) {
		ch := b[i]
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		if ch != lower[i] {
			return false
		}
	}
	return true
}

// transportMessage is the fixed message of each transport-level code: the
// HTTP layer's own error texts quote the request (headers, the API key
// among them), so none of them is ever answered or logged.
var transportMessage = map[apperr.Code]string{
	apperr.BadRequest:       "the request is not well-formed HTTP/1.1 (request line, headers or message framing); nothing was processed and the connection is closed",
	apperr.HeaderTooLarge:   "the request line and headers are too large; nothing was processed",
	apperr.RequestTimeout:   "the request did not arrive in time; nothing was processed",
	apperr.TooLarge:         "the request body is too large; nothing was processed",
	apperr.MethodNotAllowed: "this route does not take this method",
	apperr.NotFound:         "no such route",
}

// transportCode is the code of each status the HTTP layer (fasthttp and
// Fiber's router) answers by itself; any other is bad_request.
var transportCode = map[int]apperr.Code{
	fiber.StatusBadRequest:                  apperr.BadRequest,
	fiber.StatusNotFound:                    apperr.NotFound,
	fiber.StatusMethodNotAllowed:            apperr.MethodNotAllowed,
	fiber.StatusRequestTimeout:              apperr.RequestTimeout,
	fiber.StatusRequestEntityTooLarge:       apperr.TooLarge,
	fiber.StatusRequestHeaderFieldsTooLarge: apperr.HeaderTooLarge,
}

// declaredTooLarge is the message of a body refused from its declared
// length (headerReceived), on every route alike.
const declaredTooLarge = "the declared request body exceeds the limit of this route"

// hasBody reports whether the request carries a body: a Content-Length
// above 0, or chunked.
func hasBody(c *fiber.Ctx) bool {
	n := c.Request().Header.ContentLength()
	return n > 0 || n == -1
}
