package httpapi

// The framing check on the connection: every byte a client sends passes
// through a parser of HTTP/1.1 message framing (RFC 9112) before fasthttp
// reads it. fasthttp decodes a chunked body leniently (it skips anything
// up to the next CR after a chunk size, bare LF and control bytes
// included, and takes a bare LF as the end of a header block), so a body
// it accepts could end somewhere else for a proxy in front of claimd: the
// start of request smuggling. The parser tracks where each message ends on
// the raw byte stream (the header block, then Content-Length bytes or the
// chunked body with its trailer section) and stops the stream at the first
// byte that breaks the grammar:
//
//   - the header block: lines end in CRLF, the request line holds no
//     control character, each field line passes checkFraming's rules as
//     it arrives (a line without a colon, a control byte in a value, ...),
//     and the block's rules (Content-Length, Transfer-Encoding, Host) at
//     its empty line; at most Config.MaxHeaderBytes bytes, empty lines
//     before the request line included (RFC 9112 section 2.2 lets a server
//     skip them; fasthttp does).
//   - a chunked body (RFC 9112 section 7.1): chunk-size is 1 to 15 hex
//     digits (no sign, no 0x, no whitespace; 15 digits are 60 bits, more
//     are refused as fasthttp does), chunk-ext is exactly the grammar
//     *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] ) at
//     most maxChunkExt bytes a line (BWS only around ';' and '=', where
//     the grammar puts it and RFC 9110 section 5.6.3 has a recipient
//     accept it: "2b \r\n" and "2b;a \r\n" are refused), every line ends
//     in CRLF, chunk data is followed by CRLF, and the trailer section's
//     field lines pass the header rules, at most Config.MaxHeaderBytes
//     bytes. Trailer fields are then dropped from the stream: fasthttp
//     would merge them into the request's header fields (a signature sent
//     as a trailer would count as the header), which RFC 9110 section
//     6.5.1 forbids; claimd uses none.
//
// At a violation the offending byte is replaced by 'X' (a byte that can
// end no line, so fasthttp always holds an unfinished request or body:
// it closes silently when a read fails before any byte of a request or
// after only CR and LF) and every later read fails: fasthttp answers a
// broken header block 400 through the error handler, after any answers
// still due to the requests before it on the connection (431 when the
// block is over the limit: fasthttp's buffer of the same size is full
// first); a route reading the body gets an error (400); and edge (or
// methodGuard, for an unknown method) refuses a request whose body was
// found broken before its route ran (400, framing). The connection is
// closed in every case; nothing behind the violation is ever parsed. The
// parser copies nothing but a line that spans two reads, skips body bytes
// in O(1) per read and keeps no state across messages. It reads the bytes
// of the TCP connection: claimd serves plain HTTP (TLS ends at a proxy).

import (
	"bytes"
	"errors"
	"net"
	"sync/atomic"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// maxChunkExt bounds the chunk-ext bytes of one chunk line (whitespace,
// ';' and '=' included). No client claimd serves sends extensions; the
// bound keeps a line of them from being a way to trickle bytes.
const maxChunkExt = 1024

// maxChunkDigits is the most hex digits a chunk-size may have (leading
// zeros included): fasthttp refuses more, and 15 digits already exceed
// every body limit.
const maxChunkDigits = 15

// errFramingRefused is what every read of a connection returns once its
// framing was refused. Its text says neither "timeout" nor anything sent,
// so fiber's error handler makes it 400 bad_request.
var errFramingRefused = errors.New("the request's message framing is malformed; the connection is closed")

// framingState is where the parser is in a message.
type framingState uint8

const (
	stHead          framingState = iota // request line and header fields
	stBody                              // Content-Length body bytes
	stChunkSize                         // hex digits of a chunk-size
	stExtPreSemi                        // BWS after a size or value: only ';' may follow
	stExtPreName                        // after ';' and BWS: a token must follow
	stExtName                           // in a chunk-ext-name
	stExtPostName                       // BWS after a name: '=' or ';' must follow
	stExtPreValue                       // after '=' and BWS: a token or quoted-string
	stExtToken                          // in a token value
	stExtQuoted                         // in a quoted-string value
	stExtQuotedPair                     // after a backslash in a quoted-string
	stExtPostQuoted                     // after the closing quote
	stChunkLF                           // a chunk line's CR was read
	stData                              // chunk data
	stDataCR                            // chunk data read, CR due
	stDataLF                            // CR after chunk data read, LF due
	stTrailer                           // trailer section lines
)

// framingParser follows HTTP/1.1 request framing on a byte stream fed to
// it in pieces (feed). The zero value is not ready: see newFramingParser.
type framingParser struct {
	// maxHead bounds a header block and maxTrailer a trailer section, in
	// bytes (CRLFs included).
	maxHead, maxTrailer int

	state framingState
	// msg is the number of the message being parsed, from 1.
	msg uint64
	// heads counts the header blocks read whole.
	heads uint64
	// line is the current header or trailer line when it spans reads.
	line []byte
	// seen counts the bytes of the current header block (empty lines
	// before the request line included) or trailer section.
	seen int
	// requestLine: the current message's request line was read.
	requestLine bool
	tally       fieldTally
	// left is what is still to come of a Content-Length body or of the
	// current chunk's data, in bytes; while reading a chunk-size, its
	// value so far.
	left int64
	// digits and ext count the current chunk line's size digits and
	// chunk-ext bytes.
	digits, ext int
	// decoded counts the data bytes of the current chunked body.
	decoded int64
	// drops are the ranges of the bytes of the last feed that fasthttp is
	// not to read (trailer field lines), in order; keepLine: the current
	// trailer line starts with CR and is kept.
	drops    [][2]int
	keepLine bool
}

// kept moves the bytes of b[:n] that the last feed(b) did not drop to the
// front of b and returns how many there are.
func (p *framingParser) kept(b []byte, n int) int {
	if len(p.drops) == 0 {
		return n
	}
	w, r := 0, 0
	for _, d := range p.drops {
		if d[0] >= n {
			break
		}
		w += copy(b[w:], b[r:d[0]])
		r = min(d[1], n)
	}
	if r < n {
		w += copy(b[w:], b[r:n])
	}
	return w
}

func newFramingParser(maxHead int) framingParser {
	return framingParser{maxHead: maxHead, maxTrailer: maxHead, msg: 1}
}

// feed parses b, the next bytes of the stream. It returns len(b) and ""
// while the stream is well-formed, else the index in b of the first byte
// that breaks the framing and why (a fixed text). After a violation the
// parser must not be fed again.
func (p *framingParser) feed(b []byte) (int, string) {
	p.drops = p.drops[:0]
	i := 0
	for i < len(b) {
		switch p.state {
		case stHead, stTrailer:
			limit := p.maxHead
			if p.state == stTrailer {
				limit = p.maxTrailer
			}
			j := bytes.IndexByte(b[i:], '\n')
			if p.state == stTrailer {
				// Trailer fields are checked, then dropped from what
				// fasthttp reads: it would merge them into the request's
				// header fields, where claimd reads provider headers
				// (RFC 9110 section 6.5.1 lets a recipient discard them).
				// Only the empty line that ends the section passes; a line
				// starting with CR is that line or is refused.
				if len(p.line) == 0 {
					p.keepLine = b[i] == '\r'
				}
				if !p.keepLine {
					to := len(b)
					if j >= 0 {
						to = i + j + 1
					}
					p.drops = append(p.drops, [2]int{i, to})
				}
			}
			if j < 0 {
				if p.seen+len(b)-i > limit {
					return i + limit - p.seen, p.tooLarge()
				}
				p.seen += len(b) - i
				p.line = append(p.line, b[i:]...)
				return len(b), ""
			}
			if p.seen+j+1 > limit {
				return i + limit - p.seen, p.tooLarge()
			}
			p.seen += j + 1
			end := i + j
			line := b[i:end]
			if len(p.line) > 0 {
				p.line = append(p.line, line...)
				line = p.line
			}
			if len(line) == 0 || line[len(line)-1] != '\r' {
				return end, "line ends in a bare LF"
			}
			reason := p.lineDone(line[:len(line)-1])
			p.dropLine()
			if reason != "" {
				return end, reason
			}
			i = end + 1
		case stBody:
			n := min(p.left, int64(len(b)-i))
			p.left -= n
			i += int(n)
			if p.left == 0 {
				p.next()
			}
		case stData:
			n := min(p.left, int64(len(b)-i))
			p.left -= n
			p.decoded += n
			i += int(n)
			if p.left == 0 {
				p.state = stDataCR
			}
		default:
			if reason := p.chunkByte(b[i]); reason != "" {
				return i, reason
			}
			i++
		}
	}
	return len(b), ""
}

func (p *framingParser) tooLarge() string {
	if p.state == stTrailer {
		return "trailer section too large"
	}
	return "header block too large"
}

// lineDone takes one complete header or trailer line, without its CRLF.
func (p *framingParser) lineDone(line []byte) string {
	if p.state == stTrailer {
		if len(line) == 0 {
			p.next()
			return ""
		}
		_, _, reason := checkFieldLine(line)
		return reason
	}
	if !p.requestLine {
		if len(line) == 0 {
			return "" // an empty line before the request line is skipped (RFC 9112 section 2.2)
		}
		for _, ch := range line {
			if ch < ' ' || ch == 0x7f {
				return "control character in the request line"
			}
		}
		p.requestLine = true
		p.tally = fieldTally{http11: bytes.HasSuffix(line, []byte(" HTTP/1.1"))}
		return ""
	}
	if len(line) > 0 {
		return p.tally.field(line)
	}
	if reason := p.tally.end(); reason != "" {
		return reason
	}
	p.heads++
	switch {
	case p.tally.chunked:
		p.state, p.left, p.digits, p.ext, p.decoded = stChunkSize, 0, 0, 0, 0
	case p.tally.lengths > 0 && p.tally.length > 0:
		p.state, p.left = stBody, p.tally.length
	default:
		p.next()
	}
	return ""
}

// next starts the next message.
func (p *framingParser) next() {
	p.msg++
	p.state, p.seen, p.requestLine = stHead, 0, false
	p.dropLine()
}

// dropLine empties line, and lets a large one go: a connection keeps at
// most 512 bytes of it between lines.
func (p *framingParser) dropLine() {
	if cap(p.line) > 512 {
		p.line = nil
	}
	p.line = p.line[:0]
}

// chunkByte takes one byte of a chunk line or of the CRLF after chunk
// data.
func (p *framingParser) chunkByte(ch byte) string {
	switch p.state {
	case stChunkSize:
		if v := unhex(ch); v >= 0 {
			if p.digits == maxChunkDigits {
				return "chunk size has more than 15 hex digits"
			}
			p.left = p.left<<4 | int64(v)
			p.digits++
			return ""
		}
		if p.digits == 0 {
			return "chunk size is not a hexadecimal number"
		}
		switch ch {
		case '\r':
			p.state = stChunkLF
			return ""
		case ';':
			p.state = stExtPreName
		case ' ', '\t':
			p.state = stExtPreSemi
		default:
			return "chunk size is not a hexadecimal number"
		}
		p.ext++
		return ""
	case stChunkLF:
		if ch != '\n' {
			return "chunk line ends in a bare CR"
		}
		if p.left == 0 {
			p.state, p.seen = stTrailer, 0
		} else {
			p.state = stData
		}
		p.digits, p.ext = 0, 0
		return ""
	case stDataCR, stDataLF:
		if ch != "\r\n"[p.state-stDataCR] {
			return "chunk data not followed by CRLF"
		}
		if p.state == stDataLF {
			p.state, p.left = stChunkSize, 0
		} else {
			p.state = stDataLF
		}
		return ""
	}
	// A byte of chunk-ext (RFC 9112 section 7.1.1), or the CR that ends it.
	if ch == '\r' {
		switch p.state {
		case stExtName, stExtToken, stExtPostQuoted:
			p.state = stChunkLF
			return ""
		}
		return "malformed chunk extension"
	}
	if p.ext++; p.ext > maxChunkExt {
		return "chunk extension too long"
	}
	ws := ch == ' ' || ch == '\t'
	switch p.state {
	case stExtPreSemi:
		switch {
		case ch == ';':
			p.state = stExtPreName
		case !ws:
			return "malformed chunk extension"
		}
	case stExtPreName:
		switch {
		case isTokenChar(ch):
			p.state = stExtName
		case !ws:
			return "malformed chunk extension"
		}
	case stExtName, stExtPostName:
		switch {
		case ch == ';':
			p.state = stExtPreName
		case ch == '=':
			p.state = stExtPreValue
		case ws:
			p.state = stExtPostName
		case p.state == stExtPostName || !isTokenChar(ch):
			return "malformed chunk extension"
		}
	case stExtPreValue:
		switch {
		case ch == '"':
			p.state = stExtQuoted
		case isTokenChar(ch):
			p.state = stExtToken
		case !ws:
			return "malformed chunk extension"
		}
	case stExtToken, stExtPostQuoted:
		switch {
		case ch == ';':
			p.state = stExtPreName
		case ws:
			p.state = stExtPreSemi
		case p.state == stExtPostQuoted || !isTokenChar(ch):
			return "malformed chunk extension"
		}
	case stExtQuoted:
		switch {
		case ch == '"':
			p.state = stExtPostQuoted
		case ch == '\\':
			p.state = stExtQuotedPair
		case isFieldCTL(ch):
			return "malformed chunk extension"
		}
	case stExtQuotedPair:
		if isFieldCTL(ch) {
			return "malformed chunk extension"
		}
		p.state = stExtQuoted
	}
	return ""
}

// unhex is the value of a hex digit, or -1.
func unhex(ch byte) int {
	switch {
	case ch >= '0' && ch <= '9':
		return int(ch - '0')
	case ch >= 'a' && ch <= 'f':
		return int(ch-'a') + 10
	case ch >= 'A' && ch <= 'F':
		return int(ch-'A') + 10
	}
	return -1
}

// framingConn is a connection whose reads pass the framing check.
type framingConn struct {
	net.Conn
	p   framingParser
	log *zerolog.Logger
	// refused is the number of the message whose framing was refused, 0
	// while none was. Read sets it and edge reads it on the connection's
	// goroutine; atomic for any other reader.
	refused atomic.Uint64

	// lc is the connection within the listener's bounds, nil when there
	// are none; its phase is kept here (track), on the connection's
	// goroutine, from the parser and fasthttp's request cycle.
	lc *limitedConn
	// answered counts the requests fasthttp finished (its StateIdle: the
	// answer written). fasthttp's StateActive comes with a request's
	// first byte, not its header block, so it is not used.
	answered uint64
}

// track sets the connection's phase for reclaim; false when the listener
// reclaimed it.
func (c *framingConn) track() bool {
	switch p := &c.p; {
	case c.lc == nil:
		return true
	case p.heads > c.answered || p.state != stHead:
		return c.lc.moveTo(phaseBusy, 0)
	case p.seen > 0 || p.requestLine || c.answered == 0:
		return c.lc.moveTo(phaseHead, int64(p.seen))
	default:
		return c.lc.moveTo(phaseIdle, 0)
	}
}

// connState is fasthttp's ConnState hook for connections served through
// Listener: it follows each request's cycle for reclaim.
func connState(nc net.Conn, state fasthttp.ConnState) {
	c, ok := nc.(*framingConn)
	if !ok || c.lc == nil {
		return
	}
	if state == fasthttp.StateIdle {
		c.answered++
		c.track()
	}
}

func (c *framingConn) Read(b []byte) (int, error) {
	for {
		if c.refused.Load() != 0 {
			return 0, errFramingRefused
		}
		n, err := c.Conn.Read(b)
		if n <= 0 {
			return n, err
		}
		k, reason := c.p.feed(b[:n])
		w := c.p.kept(b, k)
		if !c.track() {
			return 0, net.ErrClosed
		}
		if reason != "" {
			c.refused.Store(c.p.msg)
			c.log.Warn().Str("reason", reason).Msg("request refused: ambiguous or malformed framing")
			b[w] = 'X'
			return w + 1, nil
		}
		if w > 0 || err != nil {
			return w, err
		}
		// Only dropped trailer bytes came: read on rather than return
		// nothing.
	}
}

// refusedAt reports whether the framing of the connection's request
// number n (fasthttp's ConnRequestNum, from 1) or of one before it was
// refused.
func (c *framingConn) refusedAt(n uint64) bool {
	r := c.refused.Load()
	return r != 0 && r <= n
}

// framingListener wraps every accepted connection in a framingConn.
type framingListener struct {
	net.Listener
	s *Server
}

func (l framingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc, _ := conn.(*limitedConn)
	return &framingConn{Conn: conn, p: newFramingParser(l.s.cfg.MaxHeaderBytes), log: &l.s.cfg.Logger, lc: lc}, nil
}

// FramingListener returns ln with the framing check on every connection
// it accepts (see framing.go). Listener serves the API through it; serve
// the metrics app as MetricsApp().Listener(s.FramingListener(ln)). It is to
// be the outermost wrapper, so that the handlers find it as their
// request's connection.
func (s *Server) FramingListener(ln net.Listener) net.Listener {
	return framingListener{Listener: ln, s: s}
}

// framingRefused reports whether the framing check of the request's
// connection refused the request's bytes (its chunked body, found broken
// before its route ran). False on a connection without the check.
func framingRefused(ctx *fasthttp.RequestCtx) bool {
	conn := ctx.Conn()
	for conn != nil {
		if fc, ok := conn.(*framingConn); ok {
			return fc.refusedAt(ctx.ConnRequestNum())
		}
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		conn = u.NetConn()
	}
	return false
}
