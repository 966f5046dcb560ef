package httpapi

import (
	"bytes"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
)

// feedAll feeds s to a fresh parser in pieces of at most step bytes (0:
// all at once) and returns where it stopped (len(s) when it did not), why,
// the message it was in then, and after each message that ended, the
// offset just past it and the chunked data bytes it decoded.
func feedAll(s []byte, step int) (stop int, reason string, msg uint64, ends []int, decoded []int64) {
	stop, reason, msg, ends, decoded, _ = feedKept(s, step)
	return stop, reason, msg, ends, decoded
}

// feedKept is feedAll that also returns the bytes fasthttp would read
// (trailer fields dropped) up to where the parser stopped.
func feedKept(s []byte, step int) (stop int, reason string, msg uint64, ends []int, decoded []int64, kept []byte) {
	p := newFramingParser(DefaultMaxHeaderBytes)
	if step <= 0 {
		step = len(s) + 1
	}
	off := 0
	for off < len(s) {
		piece := append([]byte(nil), s[off:min(off+step, len(s))]...)
		before := p.msg
		n, r := p.feed(piece)
		kept = append(kept, piece[:p.kept(piece, n)]...)
		if r != "" {
			return off + n, r, p.msg, ends, decoded, kept
		}
		if step == 1 && p.msg != before {
			ends = append(ends, off+1)
			decoded = append(decoded, p.decoded)
		}
		off += len(piece)
	}
	return len(s), "", p.msg, ends, decoded, kept
}

// chunkedHead is a request head that announces a chunked body.
const chunkedHead = "POST /ingest/hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"

// FuzzFramingParser feeds a request head and arbitrary bytes as its
// chunked body (and what follows it) to the framing parser: it never
// panics; where it stops and why do not depend on how the bytes are split
// into reads (whole, two pieces, byte by byte), and neither do the bytes
// it passes on (trailer fields dropped); a body it accepts is one
// Go's own chunked reader (net/http/httputil) decodes without error to
// exactly as many bytes.
func FuzzFramingParser(f *testing.F) {
	for _, s := range []string{
		"2b;a\nzz\r\n" + strings.Repeat("a", 43) + "\r\n0\r\n\r\n",
		"2b\n\r\n", "2b;a=\x01", "2b \r\n", "0x2b\r\n", "-1\r\n", "\t1\r\n",
		"1;a=b;c=\"d\\\"e\"; f = g\r\nz\r\n0;x\r\nT: v\r\n\r\n",
		"1\r\nz\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"1\r\nzz0\r\n\r\n", "0\r\n \r\n\r\n", "0\r\nT:\x00\r\n\r\n", "0\r\nT: v\n\r\n",
		"ffffffffffffffff\r\n", "000000000000001\r\na\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		in := append([]byte(chunkedHead), body...)
		stop, reason, msg, ends, decoded, kept := feedKept(in, 1)
		for _, step := range []int{0, int(cut%64) + 2} {
			s2, r2, m2, _, _, k2 := feedKept(in, step)
			if s2 != stop || r2 != reason || m2 != msg {
				t.Fatalf("split %d: stop %d %q msg %d, byte by byte: stop %d %q msg %d", step, s2, r2, m2, stop, reason, msg)
			}
			if !bytes.Equal(k2, kept) {
				t.Fatalf("split %d: kept %q, byte by byte %q", step, k2, kept)
			}
		}
		if len(kept) > stop || !bytes.HasPrefix(in, kept[:min(len(kept), len(chunkedHead))]) {
			t.Fatalf("kept %q of %q stopped at %d", kept, in, stop)
		}
		if reason != "" && stop >= len(in) {
			t.Fatalf("stop %d past the input (%d)", stop, len(in))
		}
		if reason == "" && stop != len(in) {
			t.Fatalf("no reason but stopped at %d of %d", stop, len(in))
		}
		// The first message is the chunked one: if it ended, Go's chunked
		// reader takes its body (up to the last chunk's line) alike. Go
		// refuses whitespace before ';' (it cuts the line at ';' and reads
		// the rest as the size), which RFC 9112's chunk-ext grammar allows
		// (BWS), and gives up on 16 KiB of overhead: the only differences.
		if len(ends) > 0 && len(in) < 16<<10 {
			accepted := in[len(chunkedHead):ends[0]]
			got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(accepted)))
			switch {
			case err != nil && strings.Contains(err.Error(), "invalid byte in chunk length") &&
				(bytes.Contains(accepted, []byte(" ;")) || bytes.Contains(accepted, []byte("\t;"))):
			case err != nil:
				t.Fatalf("accepted body %q: Go's chunked reader: %v", accepted, err)
			case int64(len(got)) != decoded[0]:
				t.Fatalf("accepted body %q: %d bytes, Go's chunked reader %d", accepted, decoded[0], len(got))
			}
		}
	})
}

// FuzzFramingHeaderBlock feeds a request line and arbitrary header lines
// to the framing parser and the same header block to checkFraming (which
// headerReceived runs on fasthttp's parse): both accept it or both refuse
// it, whatever the parser's reads.
func FuzzFramingHeaderBlock(f *testing.F) {
	for _, s := range []string{
		"Host: x\r\n\r\n", "Host: x\r\nnocolon\r\n\r\n", "Host: x\r\nX-A: a\x00b\r\n\r\n", "Host: x\r\nX-A: a\tb\r\n\r\n",
		"Host: x\r\nX-A : b\r\n\r\n", "Host: x\r\n b\r\n\r\n", "Host: x\r\nContent-Length: 3, 3\r\n\r\n",
		"Host: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "\r\n", "Host: x\nX: y\r\n\r\n",
		"Host: x\r\nX: a\rb\r\n\r\n", "Host: x\r\nHost: y\r\n\r\n", "Host: x\r\nTransfer-Encoding: Chunked\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(1))
	}
	const requestLine = "GET / HTTP/1.1\r\n"
	f.Fuzz(func(t *testing.T, fields []byte, step uint8) {
		in := append([]byte(requestLine), fields...)
		end := bytes.Index(in[len(requestLine)-2:], []byte("\r\n\r\n"))
		if end < 0 {
			return
		}
		head := in[:len(requestLine)-2+end+4]
		want := checkFraming(head[len(requestLine):], true)
		for _, st := range []int{0, 1, int(step%16) + 2} {
			stop, reason, _, _, _ := feedAll(head, st)
			if reason == "header block too large" {
				continue
			}
			if (reason == "") != (want == "") {
				t.Fatalf("head %q (reads of %d): parser %q at %d, checkFraming %q", head, st, reason, stop, want)
			}
		}
	})
}
