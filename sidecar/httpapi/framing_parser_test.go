package httpapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The framing parser on its own: what it accepts, where it stops and why,
// the same whether the bytes come at once or one by one.
func TestFramingParser(t *testing.T) {
	t.Parallel()
	data43 := strings.Repeat("a", 43)
	for _, c := range []struct {
		name, in string
		// stopAt is the text before the byte the parser stops at ("": it
		// accepts everything); reason a part of its reason.
		stopAt, reason string
		// msgs is the number of messages that ended, when accepted.
		msgs uint64
	}{
		{name: "two GETs", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", msgs: 2},
		{name: "empty lines before the request line", in: "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", msgs: 1},
		{name: "Content-Length body then a request", in: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n\r\n\n\x00zGET / HTTP/1.1\r\nHost: x\r\n\r\n", msgs: 2},
		{name: "HTTP/1.0 without Host", in: "GET / HTTP/1.0\r\n\r\n", msgs: 1},
		{name: "HTAB in a value", in: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n\r\n", msgs: 1},
		{name: "obs-text in a value", in: "GET / HTTP/1.1\r\nHost: x\r\nX-A: \xe9\xff\r\n\r\n", msgs: 1},
		{name: "chunked with extensions and trailers", in: chunkedHead +
			"2b;a;b=c; d = \"e\\\"f;\" ;g\r\n" + data43 + "\r\n000;z\r\nX-T: v\r\nY-T:\r\n\r\n" + chunkedHead + "0\r\n\r\n", msgs: 2},
		{name: "chunked, upper-case hex, 15 digits", in: chunkedHead + "00000000000000A\r\n0123456789\r\n0\r\n\r\n", msgs: 1},

		{name: "bare LF in chunk-ext", in: chunkedHead + "2b;a\nzz\r\n" + data43 + "\r\n0\r\n\r\n", stopAt: chunkedHead + "2b;a", reason: "malformed chunk extension"},
		{name: "bare LF after the size", in: chunkedHead + "2b\n\r\n", stopAt: chunkedHead + "2b", reason: "not a hexadecimal"},
		{name: "CTL in an ext value", in: chunkedHead + "2b;a=\x01", stopAt: chunkedHead + "2b;a=", reason: "malformed chunk extension"},
		{name: "space after the size", in: chunkedHead + "2b \r\n", stopAt: chunkedHead + "2b ", reason: "malformed chunk extension"},
		{name: "0x prefix", in: chunkedHead + "0x2b\r\n", stopAt: chunkedHead + "0", reason: "not a hexadecimal"},
		{name: "sign", in: chunkedHead + "+2b\r\n", stopAt: chunkedHead, reason: "not a hexadecimal"},
		{name: "leading space", in: chunkedHead + " 2b\r\n", stopAt: chunkedHead, reason: "not a hexadecimal"},
		{name: "leading tab", in: chunkedHead + "\t2b\r\n", stopAt: chunkedHead, reason: "not a hexadecimal"},
		{name: "trailing tab", in: chunkedHead + "2b\t\r\n", stopAt: chunkedHead + "2b\t", reason: "malformed chunk extension"},
		{name: "empty size", in: chunkedHead + "\r\n", stopAt: chunkedHead, reason: "not a hexadecimal"},
		{name: "empty size before an ext", in: chunkedHead + ";a\r\n", stopAt: chunkedHead, reason: "not a hexadecimal"},
		{name: "16 hex digits", in: chunkedHead + "0000000000000001\r\n", stopAt: chunkedHead + "000000000000000", reason: "more than 15"},
		{name: "overflowing size", in: chunkedHead + "ffffffffffffffffff\r\n", stopAt: chunkedHead + "fffffffffffffff", reason: "more than 15"},
		{name: "data not followed by CRLF", in: chunkedHead + "2\r\nabc\r\n", stopAt: chunkedHead + "2\r\nab", reason: "not followed by CRLF"},
		{name: "data followed by bare LF", in: chunkedHead + "2\r\nab\n0\r\n\r\n", stopAt: chunkedHead + "2\r\nab", reason: "not followed by CRLF"},
		{name: "bare CR after the size", in: chunkedHead + "2\rab", stopAt: chunkedHead + "2\r", reason: "bare CR"},
		{name: "bare CR in chunk-ext", in: chunkedHead + "2;a\rb\r\n", stopAt: chunkedHead + "2;a\r", reason: "bare CR"},
		{name: "ext without a name", in: chunkedHead + "2;\r\n", stopAt: chunkedHead + "2;", reason: "malformed chunk extension"},
		{name: "ext with an empty value", in: chunkedHead + "2;a=\r\n", stopAt: chunkedHead + "2;a=", reason: "malformed chunk extension"},
		{name: "ext name then space", in: chunkedHead + "2;a \r\n", stopAt: chunkedHead + "2;a ", reason: "malformed chunk extension"},
		{name: "ext name not a token", in: chunkedHead + "2;a@b\r\n", stopAt: chunkedHead + "2;a", reason: "malformed chunk extension"},
		{name: "unterminated quoted value", in: chunkedHead + "2;a=\"b\r\n", stopAt: chunkedHead + "2;a=\"b", reason: "malformed chunk extension"},
		{name: "NUL in a quoted value", in: chunkedHead + "2;a=\"\x00\"\r\n", stopAt: chunkedHead + "2;a=\"", reason: "malformed chunk extension"},
		{name: "text after a quoted value", in: chunkedHead + "2;a=\"b\"c\r\n", stopAt: chunkedHead + "2;a=\"b\"", reason: "malformed chunk extension"},
		{name: "DEL in a token value", in: chunkedHead + "2;a=b\x7f\r\n", stopAt: chunkedHead + "2;a=b", reason: "malformed chunk extension"},
		{name: "oversized chunk-ext", in: chunkedHead + "2;a=" + strings.Repeat("b", maxChunkExt) + "\r\n", stopAt: chunkedHead + "2;a=" + strings.Repeat("b", maxChunkExt-3), reason: "too long"},
		{name: "bare LF in a trailer", in: chunkedHead + "0\r\nX-T: v\n\r\n", stopAt: chunkedHead + "0\r\nX-T: v", reason: "bare LF"},
		{name: "bare CR in a trailer", in: chunkedHead + "0\r\nX-T: v\rw\r\n\r\n", stopAt: chunkedHead + "0\r\nX-T: v\rw\r", reason: "bare CR"},
		{name: "bare LF ends the trailers", in: chunkedHead + "0\r\n\n", stopAt: chunkedHead + "0\r\n", reason: "bare LF"},
		{name: "trailer without a colon", in: chunkedHead + "0\r\nX-T v\r\n\r\n", stopAt: chunkedHead + "0\r\nX-T v\r", reason: "without a colon"},
		{name: "trailer obs-fold", in: chunkedHead + "0\r\nX-T: v\r\n w\r\n\r\n", stopAt: chunkedHead + "0\r\nX-T: v\r\n w\r", reason: "folding"},
		{name: "NUL in a trailer value", in: chunkedHead + "0\r\nX-T: \x00\r\n\r\n", stopAt: chunkedHead + "0\r\nX-T: \x00\r", reason: "control character"},
		{name: "space before a trailer's colon", in: chunkedHead + "0\r\nX-T : v\r\n\r\n", stopAt: chunkedHead + "0\r\nX-T : v\r", reason: "not a token"},
		{name: "oversized trailer section", in: chunkedHead + "0\r\n" + strings.Repeat("X-T: "+strings.Repeat("v", 100)+"\r\n", 100), stopAt: chunkedHead + "0\r\n" + strings.Repeat("X-T: "+strings.Repeat("v", 100)+"\r\n", 100)[:DefaultMaxHeaderBytes], reason: "trailer section too large"},

		{name: "header line without a colon", in: "GET / HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\nnocolon\r", reason: "without a colon"},
		{name: "NUL in a header value", in: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r", reason: "control character"},
		{name: "DEL in a header value", in: "GET / HTTP/1.1\r\nHost: x\r\nX-A: \x7f\r\n\r\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\nX-A: \x7f\r", reason: "control character"},
		{name: "CTL in a header name", in: "GET / HTTP/1.1\r\nHost: x\r\nX\x01A: a\r\n\r\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\nX\x01A: a\r", reason: "not a token"},
		{name: "space before the colon", in: "GET / HTTP/1.1\r\nHost: x\r\nX-A : a\r\n\r\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\nX-A : a\r", reason: "not a token"},
		{name: "CTL in the request line", in: "GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", stopAt: "GET /\x01 HTTP/1.1\r", reason: "request line"},
		{name: "bare LF ends the request line", in: "GET / HTTP/1.1\nHost: x\r\n\r\n", stopAt: "GET / HTTP/1.1", reason: "bare LF"},
		{name: "bare LF ends the block", in: "GET / HTTP/1.1\r\nHost: x\r\n\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\n", reason: "bare LF"},
		{name: "bare LF before the request line", in: "\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", stopAt: "", reason: "bare LF"},
		{name: "no Host", in: "GET / HTTP/1.1\r\n\r\n", stopAt: "GET / HTTP/1.1\r\n\r", reason: "Host"},
		{name: "Content-Length and chunked", in: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", stopAt: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r", reason: "together"},
		{name: "header block too large", in: "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", DefaultMaxHeaderBytes) + "\r\n\r\n", stopAt: ("GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", DefaultMaxHeaderBytes))[:DefaultMaxHeaderBytes], reason: "header block too large"},
		{name: "bad second request behind a good one", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nbad\r\n\r\n", stopAt: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nbad\r", reason: "without a colon"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, step := range []int{0, 1, 7} {
				stop, reason, msg, _, _ := feedAll([]byte(c.in), step)
				if c.reason == "" {
					require.Empty(t, reason, "step %d", step)
					require.Equal(t, c.msgs+1, msg, "step %d", step)
					continue
				}
				require.Contains(t, reason, c.reason, "step %d", step)
				require.Equal(t, len(c.stopAt), stop, "step %d: stopped at %q", step, c.in[:stop])
			}
		})
	}
}

// BenchmarkFramingParser is the framing check's cost per request: a
// typical POST of 300 bytes of headers and a 1 KiB body, by Content-Length
// and chunked (in four chunks), as one read each.
func BenchmarkFramingParser(b *testing.B) {
	head := "POST /v1/claims HTTP/1.1\r\nHost: claimd:8080\r\nUser-Agent: n8n\r\nAuthorization: Bearer ick_0123456789abcdef0123456789abcdef0123456789\r\n" +
		"Content-Type: application/json\r\nAccept: application/json\r\nX-Request-Id: 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\r\nAccept-Encoding: gzip, deflate\r\n"
	body := strings.Repeat("x", 1024)
	var chunks strings.Builder
	for range 4 {
		chunks.WriteString("100\r\n" + body[:256] + "\r\n")
	}
	for name, req := range map[string]string{
		"content-length": head + "Content-Length: 1024\r\n\r\n" + body,
		"chunked":        head + "Transfer-Encoding: chunked\r\n\r\n" + chunks.String() + "0\r\n\r\n",
	} {
		b.Run(name, func(b *testing.B) {
			in := []byte(req)
			p := newFramingParser(DefaultMaxHeaderBytes)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, reason := p.feed(in); reason != "" {
					b.Fatal(reason)
				}
			}
		})
	}
}

// Trailer fields are checked and dropped from what fasthttp reads (it
// would merge them into the header fields): only the empty line that ends
// the trailer section passes, whatever the reads.
func TestFramingParserDropsTrailerFields(t *testing.T) {
	t.Parallel()
	next := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	in := chunkedHead + "2\r\nab\r\n0;e=1\r\nX-Hub-Signature-256: sha256=00\r\nY: " + strings.Repeat("w", 300) + "\r\n\r\n" + next
	want := chunkedHead + "2\r\nab\r\n0;e=1\r\n\r\n" + next
	for _, step := range []int{len(in), 1, 2, 3, 7, 64} {
		p := newFramingParser(DefaultMaxHeaderBytes)
		var got []byte
		for off := 0; off < len(in); off += step {
			piece := []byte(in[off:min(off+step, len(in))])
			n, reason := p.feed(piece)
			require.Empty(t, reason)
			got = append(got, piece[:p.kept(piece, n)]...)
		}
		require.Equal(t, want, string(got), "step %d", step)
		require.Equal(t, uint64(3), p.msg)
	}
}
