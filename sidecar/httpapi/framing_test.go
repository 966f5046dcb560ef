package httpapi_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Raw-socket tests of the framing check on the connection (framing.go):
// chunked bodies and header blocks that break RFC 9112 are answered 400
// at once and their connection closed, on every route, and the request
// pipelined behind them (a claim) never runs.

// framingSources: one GitHub source, hooks.
const framingSources = `
sources:
  hooks: {tenant: acme, provider: github, secrets: ["` + dispatchSecret + `"], ` + unusedForward + `}
`

// smuggledClaim is a complete, valid POST /v1/claims of source
// "smuggled": it must never run behind a refused request.
func smuggledClaim(eventID string) string {
	body := `{"source":"smuggled","event_id":"` + eventID + `"}`
	return "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ingestAPIKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// framingRoutes are the request heads of every route class, each ending
// where its Transfer-Encoding line and the empty line go.
var framingRoutes = map[string]string{
	"/v1/claims":        "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ingestAPIKey + "\r\nContent-Type: application/json\r\n",
	"/v1/trigger/hooks": "POST /v1/trigger/hooks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ingestAPIKey + "\r\nContent-Type: application/json\r\n",
	"/ingest/hooks":     "POST /ingest/hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: d-1\r\n",
	"/ingest/unknown":   "POST /ingest/unknown HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
	"/v1 without a key": "POST /v1/claims HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
	"/ui/login":         "POST /ui/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n",
	"/healthz":          "GET /healthz HTTP/1.1\r\nHost: x\r\n",
	"/metrics":          "GET /metrics HTTP/1.1\r\nHost: x\r\n",
	"no such route":     "POST /nowhere HTTP/1.1\r\nHost: x\r\n",
	"unknown method":    "BREW /v1/claims HTTP/1.1\r\nHost: x\r\n",
	"GET /v1/whoami":    "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ingestAPIKey + "\r\n",
}

// data43 is 43 bytes of chunk data (0x2b).
var data43 = `{"source":"s","event_id":"e","pad":"xxxxx"}`

// badChunked are chunked bodies that break RFC 9112 section 7.1, each a
// complete body to fasthttp's lenient decoder (so that without the check
// the request behind it would be read and served).
var badChunked = map[string]string{
	// Stray bytes in a chunk line: a bare LF, a control byte, a space.
	"bare LF in chunk-ext":     "2b;a\nzz\r\n" + data43 + "\r\n0\r\n\r\n",
	"bare LF after the size":   "2b\n\r\n" + data43 + "\r\n0\r\n\r\n",
	"CTL in a chunk-ext value": "2b;a=\x01\r\n" + data43 + "\r\n0\r\n\r\n",
	"space after the size":     "2b \r\n" + data43 + "\r\n0\r\n\r\n",
	// Other members of the kind.
	"0x prefix":                   "0x2b\r\n" + data43 + "\r\n0\r\n\r\n",
	"sign":                        "+2b\r\n" + data43 + "\r\n0\r\n\r\n",
	"leading space":               " 2b\r\n" + data43 + "\r\n0\r\n\r\n",
	"leading tab":                 "\t2b\r\n" + data43 + "\r\n0\r\n\r\n",
	"trailing tab":                "2b\t\r\n" + data43 + "\r\n0\r\n\r\n",
	"space after a chunk-ext":     "2b;a=b \r\n" + data43 + "\r\n0\r\n\r\n",
	"16 hex digits":               "000000000000002b\r\n" + data43 + "\r\n0\r\n\r\n",
	"overflowing size":            "1000000000000002b\r\n" + data43 + "\r\n0\r\n\r\n",
	"empty size":                  "\r\n" + data43 + "\r\n0\r\n\r\n",
	"data not followed by CRLF":   "2a\r\n" + data43 + "\r\n0\r\n\r\n",
	"data followed by a bare LF":  "2b\r\n" + data43 + "\n0\r\n\r\n",
	"bare CR in chunk-ext":        "2b;a\rb\r\n" + data43 + "\r\n0\r\n\r\n",
	"chunk-ext without a name":    "2b;=b\r\n" + data43 + "\r\n0\r\n\r\n",
	"NUL in a quoted ext value":   "2b;a=\"\x00\"\r\n" + data43 + "\r\n0\r\n\r\n",
	"bare LF in a trailer":        "2b\r\n" + data43 + "\r\n0\r\nX-T: v\n\r\n",
	"bare LF ending the trailers": "2b\r\n" + data43 + "\r\n0\r\n\n",
	"bare CR in a trailer":        "2b\r\n" + data43 + "\r\n0\r\nX-T: v\rw\r\n\r\n",
	"trailer without a colon":     "2b\r\n" + data43 + "\r\n0\r\nX-T v\r\n\r\n",
	"trailer obs-fold":            "2b\r\n" + data43 + "\r\n0\r\nX-T: v\r\n w\r\n\r\n",
	"NUL in a trailer value":      "2b\r\n" + data43 + "\r\n0\r\nX-T: \x00\r\n\r\n",
	"oversized chunk-ext":         "2b;a=" + strings.Repeat("b", 2000) + "\r\n" + data43 + "\r\n0\r\n\r\n",
}

// A chunked body that breaks RFC 9112 is answered 400 bad_request at once
// on every route, the connection is closed, and the claim pipelined
// behind it never runs.
func TestMalformedChunkedBodyIsRefusedOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, framingSources, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	n := 0
	for route, head := range framingRoutes {
		for name, body := range badChunked {
			t.Run(route+"/"+name, func(t *testing.T) {
				n++
				req := head + "Transfer-Encoding: chunked\r\n\r\n" + body + smuggledClaim(fmt.Sprintf("evt-%d", n))
				replies := rawExchange(t, addr, req, 10*time.Second)
				require.Len(t, replies, 1, "one answer, then the connection closes: %+v", replies)
				require.Equal(t, http.StatusBadRequest, replies[0].status, "%s", replies[0].body)
				require.Equal(t, "bad_request", replies[0].code(t))
				require.True(t, replies[0].closed)
			})
		}
	}
	require.Equal(t, ingestCounts{}, e.counts(t, "smuggled"), "a request behind a refused body ran")
	require.Equal(t, ingestCounts{}, e.counts(t, "hooks"))
	require.Contains(t, e.logs.String(), "request refused: ambiguous or malformed framing")
}

// The same on a kept-alive connection (a valid request answered first,
// then the malformed one) and pipelined behind a valid request: the valid
// one is answered 200, the malformed one 400, the connection closes, and
// the claim behind it never runs. Bodies that arrive after the route
// started reading them are refused alike.
func TestMalformedChunkedBodyOnKeptAliveAndPipelinedConnections(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, framingSources, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	n := 0
	valid := func() string {
		n++
		body := fmt.Sprintf(`{"source":"valid","event_id":"evt-%d"}`, n)
		return "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ingestAPIKey +
			"\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + ";x=\"y\"\r\n" + body + "\r\n0\r\n\r\n"
	}
	for _, route := range []string{"/v1/claims", "/ingest/hooks", "/healthz"} {
		for name, body := range badChunked {
			bad := framingRoutes[route] + "Transfer-Encoding: chunked\r\n\r\n" + body
			t.Run("kept alive/"+route+"/"+name, func(t *testing.T) {
				conn := dialRaw(t, addr)
				writeRaw(t, conn, valid())
				br := bufio.NewReader(conn)
				first := readRawReply(t, conn, br)
				require.Equal(t, http.StatusOK, first.status, "%s", first.body)
				require.False(t, first.closed)
				writeRaw(t, conn, bad+smuggledClaim(fmt.Sprintf("evt-ka-%d", n)))
				second := readRawReply(t, conn, br)
				require.Equal(t, http.StatusBadRequest, second.status, "%s", second.body)
				require.Equal(t, "bad_request", second.code(t))
				require.True(t, second.closed)
				requireClosed(t, conn, br)
			})
			t.Run("pipelined/"+route+"/"+name, func(t *testing.T) {
				replies := rawExchange(t, addr, valid()+bad+smuggledClaim(fmt.Sprintf("evt-pl-%d", n)), 10*time.Second)
				require.Len(t, replies, 2, "%+v", replies)
				require.Equal(t, http.StatusOK, replies[0].status, "%s", replies[0].body)
				require.Equal(t, http.StatusBadRequest, replies[1].status, "%s", replies[1].body)
				require.Equal(t, "bad_request", replies[1].code(t))
				require.True(t, replies[1].closed)
			})
			if route == "/healthz" {
				continue // a route that reads no body answers it from its headers when they come alone
			}
			t.Run("body sent after the head/"+route+"/"+name, func(t *testing.T) {
				conn := dialRaw(t, addr)
				cut := strings.Index(bad, "\r\n\r\n") + 4
				writeRaw(t, conn, bad[:cut])
				writeRaw(t, conn, bad[cut:]+smuggledClaim(fmt.Sprintf("evt-split-%d", n)))
				br := bufio.NewReader(conn)
				r := readRawReply(t, conn, br)
				require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
				require.True(t, r.closed)
				requireClosed(t, conn, br)
			})
		}
	}
	require.Equal(t, ingestCounts{}, e.counts(t, "smuggled"), "a request behind a refused body ran")
	require.Equal(t, strconv.Itoa(n), e.scalar(t, `SELECT count(*) FROM claims WHERE source = 'valid'`), "every valid request ran once")
}

// Valid chunked bodies with chunk extensions (token and quoted-string
// values, whitespace around ';' and '=' as RFC 9112's grammar allows) and
// trailer fields are accepted: a signed GitHub delivery is verified and
// stored, with a second one pipelined behind it on the same connection.
func TestValidChunkedBodiesAreAccepted(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, framingSources, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	delivery := func(id string, chunked func(body string) string) string {
		body := `{"ref":"refs/heads/main","id":"` + id + `","pad":"` + strings.Repeat("p", 300) + `"}`
		d := githubDelivery(dispatchSecret, id, []byte(body))
		req := "POST /ingest/hooks HTTP/1.1\r\nHost: x\r\n"
		for _, kv := range d.header {
			req += kv[0] + ": " + kv[1] + "\r\n"
		}
		return req + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body)
	}
	forms := map[string]func(string) string{
		"one chunk": func(b string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b) },
		"extensions, quoted values, BWS": func(b string) string {
			return fmt.Sprintf("%X;a;b=c\r\n%s\r\n%x ; d = \"e \\\"f\\\\ ;g\"\t;h=i\r\n%s\r\n000;last=\"yes\"\r\n\r\n", 10, b[:10], len(b)-10, b[10:])
		},
		"trailers": func(b string) string {
			return fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Checksum: abc\r\nX-Empty:\r\nX-Tab: a\tb\r\n\r\n", len(b), b)
		},
		"leading zeros, many tiny": func(b string) string { return tinyChunks(b) },
	}
	var req strings.Builder
	i := 0
	for _, form := range forms {
		i++
		req.WriteString(delivery(fmt.Sprintf("chunked-ok-%d", i), form))
	}
	replies := rawExchange(t, addr, req.String(), 5*time.Second)
	require.Len(t, replies, len(forms), "%+v", replies)
	for _, r := range replies {
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.False(t, r.closed)
	}
	require.Equal(t, len(forms), e.counts(t, "hooks").inbox, "each delivery verified and stored once")
}

// tinyChunks sends b in chunks of 1 to 7 bytes with zero-padded sizes.
func tinyChunks(b string) string {
	var s strings.Builder
	for i, k := 0, 1; i < len(b); k = k%7 + 1 {
		k = min(k, len(b)-i)
		fmt.Fprintf(&s, "%04x\r\n%s\r\n", k, b[i:i+k])
		i += k
	}
	return s.String() + "0\r\n\r\n"
}

// A header line without a colon, a control byte in a header value (NUL,
// 0x01-0x08, 0x0B, 0x0C, 0x0E-0x1F, DEL) or in a field name, whitespace
// before the colon: answered 400 at once (fasthttp alone held a line
// without a colon until the read timeout), on a new, a kept-alive and a
// pipelined connection, and the claim behind never runs. HTAB inside a
// value is accepted.
func TestHeaderOdditiesAreRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, framingSources, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	const head = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
	bad := map[string]string{
		"line without a colon":    head + "X-Nocolon\r\n\r\n",
		"space before the colon":  head + "X-A : v\r\n\r\n",
		"tab before the colon":    head + "X-A\t: v\r\n\r\n",
		"CTL in a field name":     head + "X-\x01A: v\r\n\r\n",
		"bare CR in a value":      head + "X-A: a\rb\r\n\r\n",
		"CTL in the request line": "GET /healthz\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
		"obs-fold":                head + "X-A: a\r\n\tb\r\n\r\n",
	}
	for ch := range 0x20 {
		if ch == '\t' || ch == '\r' || ch == '\n' {
			continue
		}
		bad[fmt.Sprintf("0x%02X in a value", ch)] = head + "X-A: a" + string(rune(ch)) + "b\r\n\r\n"
	}
	bad["0x7F in a value"] = head + "X-A: a\x7fb\r\n\r\n"
	bad["NUL at the end of a value"] = head + "X-A: ab\x00\r\n\r\n"
	ok := head + "X-A: a\tb\r\nX-B:\tc\t\r\n\r\n"
	n := 0
	for name, req := range bad {
		t.Run("new/"+name, func(t *testing.T) {
			n++
			replies := rawExchange(t, addr, req+smuggledClaim(fmt.Sprintf("hdr-%d", n)), 10*time.Second)
			require.Len(t, replies, 1, "%+v", replies)
			require.Equal(t, http.StatusBadRequest, replies[0].status, "%s", replies[0].body)
			require.Equal(t, "bad_request", replies[0].code(t))
			require.True(t, replies[0].closed)
		})
		t.Run("pipelined/"+name, func(t *testing.T) {
			n++
			replies := rawExchange(t, addr, ok+req+smuggledClaim(fmt.Sprintf("hdr-%d", n)), 10*time.Second)
			require.Len(t, replies, 2, "%+v", replies)
			require.Equal(t, http.StatusOK, replies[0].status, "HTAB inside a value is accepted: %s", replies[0].body)
			require.Equal(t, http.StatusBadRequest, replies[1].status, "%s", replies[1].body)
			require.Equal(t, "bad_request", replies[1].code(t))
			require.True(t, replies[1].closed)
		})
		t.Run("kept alive/"+name, func(t *testing.T) {
			n++
			conn := dialRaw(t, addr)
			br := bufio.NewReader(conn)
			writeRaw(t, conn, ok)
			first := readRawReply(t, conn, br)
			require.Equal(t, http.StatusOK, first.status, "%s", first.body)
			writeRaw(t, conn, req+smuggledClaim(fmt.Sprintf("hdr-%d", n)))
			second := readRawReply(t, conn, br)
			require.Equal(t, http.StatusBadRequest, second.status, "%s", second.body)
			require.True(t, second.closed)
			requireClosed(t, conn, br)
		})
	}
	require.Equal(t, ingestCounts{}, e.counts(t, "smuggled"), "a request behind a refused header block ran")
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func writeRaw(t *testing.T, conn net.Conn, s string) {
	t.Helper()
	_, err := io.WriteString(conn, s)
	require.NoError(t, err)
}

// readRawReply reads one answer (within 10 s: it must come at once).
func readRawReply(t *testing.T, conn net.Conn, br *bufio.Reader) rawReply {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer")
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	return rawReply{status: res.StatusCode, header: res.Header, body: body, closed: res.Close}
}

// requireClosed: the server closed the connection and nothing more came
// (EOF, or a reset when it closed with bytes of ours unread).
func requireClosed(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := br.ReadByte()
	if !errors.Is(err, syscall.ECONNRESET) {
		require.ErrorIs(t, err, io.EOF, "the connection stays open")
	}
}

// A malformed chunked body that arrives a byte per write, after its route
// started reading, and a trailer section past its bound (more than one
// read of the server) are refused alike: 400, connection closed, nothing
// behind them run.
func TestMalformedChunkedBodyInPieces(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, framingSources, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	trailers := strings.Repeat("X-Pad: "+strings.Repeat("p", 100)+"\r\n", 90) // 9.9 KiB
	n := 0
	for _, route := range []string{"/v1/claims", "/ingest/hooks", "/v1/trigger/hooks"} {
		for name, body := range map[string]string{
			"bare LF in chunk-ext, a byte per write": "2b;a\nzz\r\n" + data43 + "\r\n0\r\n\r\n",
			"space after the size, a byte per write": "2b \r\n" + data43 + "\r\n0\r\n\r\n",
			"oversized trailer section":              "2b\r\n" + data43 + "\r\n0\r\n" + trailers + "\r\n",
		} {
			t.Run(route+"/"+name, func(t *testing.T) {
				n++
				conn := dialRaw(t, addr)
				writeRaw(t, conn, framingRoutes[route]+"Transfer-Encoding: chunked\r\n\r\n")
				if strings.HasSuffix(name, "a byte per write") {
					for i := range len(body) {
						if _, err := io.WriteString(conn, body[i:i+1]); err != nil {
							break // the server refused and closed: the rest is not wanted
						}
					}
				} else {
					writeRaw(t, conn, body)
				}
				_, _ = io.WriteString(conn, smuggledClaim(fmt.Sprintf("evt-pieces-%d", n)))
				br := bufio.NewReader(conn)
				r := readRawReply(t, conn, br)
				require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
				require.Equal(t, "bad_request", r.code(t))
				require.True(t, r.closed)
				requireClosed(t, conn, br)
			})
		}
	}
	require.Equal(t, ingestCounts{}, e.counts(t, "smuggled"), "a request behind a refused body ran")
	require.Equal(t, ingestCounts{}, e.counts(t, "hooks"))
}

// Trailer fields never stand in for header fields: a GitHub delivery whose
// signature comes only as a trailer field is unauthenticated (fasthttp
// merged trailer fields into the headers, where the signature is read),
// while the same delivery with its signature as a header and other
// trailer fields is stored.
func TestTrailerFieldsAreNotHeaders(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, framingSources, ingestOptions{})
	addr := strings.TrimPrefix(e.base, "http://")
	body := `{"ref":"refs/heads/main","id":"trailer-1"}`
	d := githubDelivery(dispatchSecret, "trailer-1", []byte(body))
	head, sig := "POST /ingest/hooks HTTP/1.1\r\nHost: x\r\n", ""
	for _, kv := range d.header {
		if kv[0] == "X-Hub-Signature-256" {
			sig = kv[0] + ": " + kv[1] + "\r\n"
			continue
		}
		head += kv[0] + ": " + kv[1] + "\r\n"
	}
	chunks := fmt.Sprintf("%x\r\n%s\r\n0\r\n", len(body), body)
	replies := rawExchange(t, addr, head+"Transfer-Encoding: chunked\r\n\r\n"+chunks+sig+"\r\n", 10*time.Second)
	require.Len(t, replies, 1)
	require.Equal(t, http.StatusUnauthorized, replies[0].status, "a signature in a trailer is no signature: %s", replies[0].body)
	require.Equal(t, ingestCounts{}, e.counts(t, "hooks"))

	replies = rawExchange(t, addr, head+sig+"Transfer-Encoding: chunked\r\n\r\n"+chunks+"X-GitHub-Delivery: other\r\nX-Checksum: c\r\n\r\n", 10*time.Second)
	require.Len(t, replies, 1)
	require.Equal(t, http.StatusOK, replies[0].status, "%s", replies[0].body)
	require.Contains(t, string(replies[0].body), `"event_id":"trailer-1"`, "the header's delivery id, not the trailer's")
	require.Equal(t, 1, e.counts(t, "hooks").inbox)
}
