package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// Raw-socket tests of the HTTP edge (edge.go): what a caller can send
// below the level of an HTTP client library.

// rawReply is one answer read off a raw connection.
type rawReply struct {
	status int
	header http.Header
	body   []byte
	// closed: the server closed the connection after this answer.
	closed bool
}

func (r rawReply) code(t *testing.T) string {
	t.Helper()
	var e httpapi.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &e), "status %d body %q", r.status, r.body)
	return string(e.Error.Code)
}

// rawExchange writes req on a new connection to addr and reads every
// answer until the server closes the connection or no further answer
// comes within idle (an open connection: the last reply's closed is false).
func rawExchange(t *testing.T, addr, req string, idle time.Duration) []rawReply {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, req)
	require.NoError(t, err)
	return readReplies(t, conn, idle)
}

func readReplies(t *testing.T, conn net.Conn, idle time.Duration) []rawReply {
	t.Helper()
	br := bufio.NewReader(conn)
	var out []rawReply
	for {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(idle)))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return out // still open
			}
			if len(out) > 0 {
				out[len(out)-1].closed = true
			}
			return out
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		out = append(out, rawReply{status: res.StatusCode, header: res.Header, body: body, closed: res.Close})
		if res.Close {
			// The server says it closes: the next read must see EOF.
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(idle)))
			_, err := br.ReadByte()
			require.Error(t, err, "the connection stays open after Connection: close")
			return out
		}
	}
}

// secretMarker is an API key that must never appear in an answer or a log line.
const secretMarker = "ick_SECRETMARKERxxxxxxxxxxxxxxxxxxxxxxxxxxxx9"

// Every malformed request carries the secretMarker key (and the secretMarker as other
// header values and body bytes); no answer and no log line contains it,
// and each is answered with its own code.
func TestTransportErrorsNeverEchoTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) {
		o.server = func(c *httpapi.Config) { c.ReadTimeout = 2 * time.Second }
	})
	auth := "Authorization: Bearer " + secretMarker + "\r\n"
	for _, c := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"negative Content-Length", "POST /v1/claims HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: -1\r\n\r\n{}", 400, "bad_request"},
		{"Content-Length not a number", "POST /v1/claims HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: " + secretMarker + "\r\n\r\n{}", 400, "bad_request"},
		{"space before the colon", "POST /v1/claims HTTP/1.1\r\nHost: x\r\n" + auth + "X-Key : " + secretMarker + "\r\nContent-Length: 2\r\n\r\n{}", 400, "bad_request"},
		// fasthttp alone reads a line without a colon as an unfinished
		// header block and waits; the framing check refuses it at once.
		{"header line without a colon", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + secretMarker + "\r\n\r\n", 400, "bad_request"},
		{"NUL in a header value", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "X-A: " + secretMarker + "\x00\r\n\r\n", 400, "bad_request"},
		{"request line garbage", secretMarker + " " + secretMarker + "\r\nHost: x\r\n" + auth + "\r\n", 405, "method_not_allowed"},
		{"request line without a version", "GET /v1/whoami " + secretMarker + "\r\nHost: x\r\n" + auth + "\r\n", 400, "bad_request"},
		{"unknown method", "BREW /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 405, "method_not_allowed"},
		{"HTTP version garbage", "GET /v1/whoami HTTP/" + secretMarker + "\r\nHost: x\r\n" + auth + "\r\n", 400, "bad_request"},
		{"obsolete line folding", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "X-A: a\r\n " + secretMarker + "\r\n\r\n", 400, "bad_request"},
		{"bare LF", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "X-A: " + secretMarker + "\n\r\n", 400, "bad_request"},
		{"NUL in a field name", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "X-\x00A: " + secretMarker + "\r\n\r\n", 400, "bad_request"},
		{"Content-Length and chunked", "POST /v1/claims HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_request"},
		{"two Content-Length values", "POST /v1/claims HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}", 400, "bad_request"},
		{"a transfer coding other than chunked", "POST /v1/claims HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400, "bad_request"},
		{"chunked on HTTP/1.0", "POST /v1/claims HTTP/1.0\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_request"},
		{"no Host", "GET /v1/whoami HTTP/1.1\r\n" + auth + "\r\n", 400, "bad_request"},
		{"two Host headers", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nHost: " + secretMarker + "\r\n" + auth + "\r\n", 400, "bad_request"},
		{"malformed chunk size", "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA + "\r\nTransfer-Encoding: chunked\r\n\r\n" + secretMarker + "\r\n\r\n", 400, "bad_request"},
		{"body shorter than declared", "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA + "\r\nContent-Length: 4000\r\n\r\n{\"" + secretMarker, 408, "request_timeout"},
		{"headers too large", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "X-Pad: " + strings.Repeat(secretMarker, 400) + "\r\n\r\n", 431, "header_too_large"},
		{"headers never end", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "X-A: " + secretMarker, 408, "request_timeout"},
		{"declared body over the limit", "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA + "\r\nContent-Length: 99999999\r\n\r\n" + secretMarker, 413, "body_too_large"},
		{"no such route", "GET /" + secretMarker + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 404, "not_found"},
		{"no such method", "DELETE /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA + "\r\nX-A: " + secretMarker + "\r\n\r\n", 405, "method_not_allowed"},
		{"wrong key", "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 401, "unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			replies := rawExchange(t, b.addr, c.req, 5*time.Second)
			require.Len(t, replies, 1, "one answer, then nothing: %+v", replies)
			r := replies[0]
			require.Equal(t, c.status, r.status, "%s", r.body)
			require.Equal(t, c.code, r.code(t), "%s", r.body)
			require.NotContains(t, string(r.body), secretMarker)
			for k, vs := range r.header {
				require.NotContains(t, k+strings.Join(vs, ","), secretMarker)
			}
			if c.status != 401 && c.status != 404 && c.status != 405 {
				require.True(t, r.closed, "%d closes the connection", c.status)
			}
		})
	}
	require.NotContains(t, b.logs.String(), secretMarker, "the secretMarker reached the log")
	require.NotContains(t, b.logs.String(), "SECRETMARKER")
}

// RFC 9112 section 6.3: a request behind an ambiguous framing is never
// served, and the connection is closed.
func TestAmbiguousFramingNeverServesTheHiddenRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hidden := claimRequest("smuggled", "evt-hidden")
	for name, lead := range map[string]string{
		"Content-Length and chunked": "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA +
			"\r\nContent-Length: " + strconv.Itoa(len("0\r\n\r\n")+len(hidden)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"chunked and Content-Length": "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA +
			"\r\nTransfer-Encoding: chunked\r\nContent-Length: " + strconv.Itoa(len("0\r\n\r\n")+len(hidden)) + "\r\n\r\n0\r\n\r\n",
		"two Content-Length values": "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA +
			"\r\nContent-Length: 0\r\nContent-Length: " + strconv.Itoa(len(hidden)) + "\r\n\r\n",
		"TE with different case and spacing": "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA +
			"\r\nContent-Length: " + strconv.Itoa(len("0\r\n\r\n")+len(hidden)) + "\r\ntransfer-encoding:  Chunked\r\n\r\n0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			replies := rawExchange(t, b.addr, lead+hidden, 3*time.Second)
			require.Len(t, replies, 1, "the hidden request was answered: %+v", replies)
			require.Equal(t, http.StatusBadRequest, replies[0].status, "%s", replies[0].body)
			require.Equal(t, "bad_request", replies[0].code(t))
			require.True(t, replies[0].closed)
		})
	}
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims WHERE source = 'smuggled'`).Scan(&n))
	require.Zero(t, n, "a smuggled claim was stored")
}

// claimRequest is a complete, valid POST /v1/claims of tenant A.
func claimRequest(source, eventID string) string {
	body := `{"source":"` + source + `","event_id":"` + eventID + `"}`
	return "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// Keep-alive still works: pipelined valid requests (identical repeated
// Content-Length included) are each answered on one connection; a request
// refused before its body was read closes the connection, so its body is
// never parsed as the next request.
func TestKeepAliveAndUnreadBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	two := claimRequest("keep", "evt-2")
	bodyLen := strconv.Itoa(len(two) - strings.Index(two, "\r\n\r\n") - 4)
	twice := strings.Replace(two, "Content-Length:", "Content-Length: "+bodyLen+"\r\nContent-Length:", 1)
	replies := rawExchange(t, b.addr, claimRequest("keep", "evt-1")+twice+claimRequest("keep", "evt-3"), time.Second)
	require.Len(t, replies, 3, "%+v", replies)
	for _, r := range replies {
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.False(t, r.closed)
	}

	// Without a key the body is never read: the answer comes at once, the
	// connection closes, and the bytes behind it (a valid claim) are not
	// served.
	hidden := claimRequest("keep", "evt-hidden")
	noKey := "POST /v1/claims HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(hidden)) + "\r\n\r\n" + hidden
	replies = rawExchange(t, b.addr, noKey, 3*time.Second)
	require.Len(t, replies, 1, "%+v", replies)
	require.Equal(t, http.StatusUnauthorized, replies[0].status)
	require.True(t, replies[0].closed)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims WHERE event_id = 'evt-hidden'`).Scan(&n))
	require.Zero(t, n)
}

// A /v1 request without a valid key is refused from its headers: the
// answer arrives while the declared body has not been sent at all.
// Without an Authorization header not a byte of it is read; with a wrong
// key at most the first 8 KiB (fasthttp reads that much before routing).
func TestUnauthenticatedBodyIsNeverRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for key, sent := range map[string]string{
		"":        "{",
		"Basic x": "{",
		"Bearer ick_wrongwrongwrongwrongwrongwrongwrongwrong0": "{" + strings.Repeat(" ", 8<<10),
	} {
		h := ""
		if key != "" {
			h = "Authorization: " + key + "\r\n"
		}
		// Within the route's limit (64 KiB here): over it, the answer is
		// 413 from the declared length alone, before the key is looked at.
		replies := rawExchange(t, b.addr, "POST /v1/claims HTTP/1.1\r\nHost: x\r\n"+h+"Content-Length: 60000\r\n\r\n"+sent, 10*time.Second)
		require.Len(t, replies, 1, "%q", key)
		require.Equal(t, http.StatusUnauthorized, replies[0].status, "%s", replies[0].body)
		require.True(t, replies[0].closed)
	}
}

// Each route has its own body limit: /v1 CLAIMD_BODY_LIMIT_BYTES, each
// ingest source its max_body_bytes; a large source limit does not raise
// the API's.
func TestBodyLimitsArePerRoute(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  big: {tenant: acme, provider: github, secrets: ["`+dispatchSecret+`"], max_body_bytes: 8388608, `+unusedForward+`}
  small: {tenant: acme, provider: github, secrets: ["`+dispatchSecret+`"], max_body_bytes: 1024, `+unusedForward+`}
`, ingestOptions{server: func(c *httpapi.Config) { c.BodyLimit = 64 << 10 }})
	body := []byte(`{"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	ans := e.send(t, "big", githubDelivery(dispatchSecret, "per-route-1", body))
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	ans = e.send(t, "small", githubDelivery(dispatchSecret, "per-route-2", body[:2048]))
	require.Equal(t, http.StatusRequestEntityTooLarge, ans.status, "%s", ans.body)
	require.Equal(t, "body_too_large", ans.errorCode(t))

	req, err := http.NewRequest(http.MethodPost, e.base+"/v1/claims", bytes.NewReader(body[:128<<10]))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
	res := e.do(t, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "%s", res.body)
	require.Equal(t, "body_too_large", res.errorCode(t))

	// Chunked bodies are bounded as they arrive.
	replies := rawExchange(t, strings.TrimPrefix(e.base, "http://"), "POST /ingest/small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"800\r\n"+strings.Repeat("a", 0x800)+"\r\n0\r\n\r\n", 5*time.Second)
	require.Len(t, replies, 1)
	require.Equal(t, http.StatusRequestEntityTooLarge, replies[0].status, "%s", replies[0].body)
	require.True(t, replies[0].closed)
}

// An anonymous caller cannot tell a configured source from an unknown
// one: the same status, headers and body.
func TestIngestAnonymousAnswersAreIdentical(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  hooks: {tenant: acme, provider: github, secrets: ["`+dispatchSecret+`"], `+unusedForward+`}
  stripe: {tenant: acme, provider: stripe, secrets: ["whsec_test"], `+unusedForward+`}
`, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	body := `{"id":"evt_1"}`
	for _, sig := range []string{"", "X-Hub-Signature-256: sha256=00\r\n", "Stripe-Signature: t=1,v1=00\r\n"} {
		var answers []rawReply
		for _, path := range []string{"/ingest/hooks", "/ingest/stripe", "/ingest/nope", "/ingest/" + strings.Repeat("n", 300)} {
			req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + sig +
				"X-GitHub-Delivery: d-1\r\nX-GitHub-Event: push\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			rs := rawExchange(t, addr, req, 5*time.Second)
			require.Len(t, rs, 1)
			answers = append(answers, rs[0])
		}
		for i, a := range answers {
			a.header.Del("X-Request-Id")
			a.header.Del("Date")
			require.Equal(t, http.StatusUnauthorized, a.status, "%d: %s", i, a.body)
			require.Equal(t, answers[0].header, a.header, "%d", i)
			require.Equal(t, string(answers[0].body), string(a.body), "%d", i)
			require.True(t, a.closed)
		}
	}
	require.Equal(t, ingestCounts{}, e.counts(t, "hooks"))

	// Past the default max_body_bytes, a source of the default limit and
	// an unknown name are refused alike from the declared length.
	var big []rawReply
	for _, path := range []string{"/ingest/hooks", "/ingest/nope"} {
		rs := rawExchange(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 5*time.Second)
		require.Len(t, rs, 1)
		rs[0].header.Del("X-Request-Id")
		rs[0].header.Del("Date")
		big = append(big, rs[0])
	}
	require.Equal(t, http.StatusRequestEntityTooLarge, big[0].status, "%s", big[0].body)
	require.Equal(t, big[0].status, big[1].status)
	require.Equal(t, big[0].header, big[1].header)
	require.Equal(t, string(big[0].body), string(big[1].body))
}

// A body that finds no room in its class's budget within the request
// timeout is refused 503 with Retry-After, and the other class's budget is
// untouched: held ingest bodies never starve /v1.
func TestBodyBudgetRefusesWhenFull(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  hooks: {tenant: acme, provider: github, secrets: ["`+dispatchSecret+`"], max_body_bytes: 65536, `+unusedForward+`}
`, ingestOptions{server: func(c *httpapi.Config) {
		c.IngestBodyBytesInFlight = 64 << 10
		c.RequestTimeout = time.Second
		c.IngestBodyGrace = time.Hour // the holder is never cut
	}})
	addr := strings.TrimPrefix(e.base, "http://")
	head := "POST /ingest/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"
	holder, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer holder.Close()
	_, err = io.WriteString(holder, head+strings.Repeat("a", 59000)) // an ingest body holds what arrived
	require.NoError(t, err)
	waitForCondition(t, "the held body to fill the budget", func() bool {
		return strings.Contains(scrapeMetrics(t, e.base), `claimd_http_body_bytes{class="ingest",kind="reserved"} 59000`)
	})

	replies := rawExchange(t, addr, head+strings.Repeat("b", 60000), 10*time.Second)
	require.Len(t, replies, 1)
	require.Equal(t, http.StatusServiceUnavailable, replies[0].status, "%s", replies[0].body)
	require.Equal(t, "unavailable", replies[0].code(t))
	require.Equal(t, "1", replies[0].header.Get("Retry-After"))

	// /v1 has its own budget.
	req, err := http.NewRequest(http.MethodPost, e.base+"/v1/claims", strings.NewReader(`{"source":"s","event_id":"`+strings.Repeat("e", 200)+`","payload":{"pad":"`+strings.Repeat("p", 20000)+`"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
	res := e.do(t, req)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
}

// waitForCondition polls cond (every 10 ms, at most 30 s).
func waitForCondition(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// scrapeMetrics returns the text of GET base/metrics.
func scrapeMetrics(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// A body a little over its limit is read and discarded before the 413, so
// an ordinary client that is still sending it reads the answer instead of
// a reset connection (each of these failed about half the time when the
// connection was closed unread).
func TestSmallOversizedBodyGetsItsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t) // /v1 limit 64 KiB
	body := `{"source":"s","event_id":"big","payload":"` + strings.Repeat("x", 70<<10) + `"}`
	for range 20 {
		req, err := http.NewRequest(http.MethodPost, "http://"+b.addr+"/v1/claims", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+keyA)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "the client must read the 413, not a reset")
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, "%s", got)
		require.True(t, res.Close)
	}
}

// A request whose headers arrive during the drain, its body still being
// sent, is answered 503 unavailable with Connection: close after its small
// body was read and discarded: the client reads the answer instead of a
// reset connection. Nothing it carried is stored.
func TestDrainReadsASmallBodyBeforeTheRefusal(t *testing.T) {
	t.Parallel()
	for name, pad := range map[string]int{"within the body limit": 32 << 10, "over the body limit (64 KiB)": 100 << 10} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			conn, err := net.Dial("tcp", b.addr)
			require.NoError(t, err)
			defer conn.Close()
			b.server.Drain()
			body := `{"source":"drain","event_id":"evt-drain-1","payload":{"pad":"` + strings.Repeat("x", pad) + `"}}`
			_, err = io.WriteString(conn, "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+keyA+
				"\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body[:10])
			require.NoError(t, err)
			// The rest follows in pieces, after the server may have answered.
			for rest := body[10:]; rest != ""; {
				n := min(len(rest), 8<<10)
				_, err = io.WriteString(conn, rest[:n])
				require.NoError(t, err, "the server reads the body it refuses")
				rest = rest[n:]
			}
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			got, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s", got)
			require.Equal(t, "1", res.Header.Get("Retry-After"))
			require.True(t, res.Close)
			require.Contains(t, string(got), `"code":"unavailable"`)
			var n int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims WHERE event_id = 'evt-drain-1'`).Scan(&n))
			require.Zero(t, n)
		})
	}
}
