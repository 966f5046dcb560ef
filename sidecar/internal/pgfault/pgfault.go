// Package pgfault puts a TCP proxy between a test's connections and a real
// PostgreSQL server that can break one session at a chosen statement, the
// way a failover, a crash or a network fault breaks it: before the
// statement reaches the server, or after the server ran it to its end (and
// committed it, outside a transaction) with its reply lost. Tests use it to
// check what the sidecar answers when the outcome of a request is unknown,
// and that retrying the same request is answered as what happened.
//
// The proxy reads the PostgreSQL wire protocol (version 3) only to find
// message boundaries and statement texts; it needs connections without TLS
// (sslmode=disable).
package pgfault

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Cut is where a trap breaks the session.
type Cut int

// Cuts.
const (
	// BeforeSend closes the client's connection in place of sending the
	// matching statement: the server never runs it.
	BeforeSend Cut = iota
	// AfterReply lets the server run the matching statement to its end
	// (its ReadyForQuery), withholds the whole reply, then closes the
	// client's connection: the statement took effect (committed, when it
	// ran outside a transaction or was the COMMIT) and the client cannot
	// know.
	AfterReply
	// Stall is AfterReply without the close: the reply never comes, until
	// the client gives up (its context ends) and closes the connection.
	Stall
)

// Proxy forwards connections to one PostgreSQL server.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	trap     *trap
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup
}

type trap struct {
	match func(sql string) bool
	cut   Cut
	reset bool
	fired chan struct{}
}

// New starts a proxy to the server of serverURL (a postgres:// URL) on a
// loopback port; it stops, with every session, when t ends.
func New(t testing.TB, serverURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgfault: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgfault: %v", err)
	}
	p := &Proxy{ln: ln, target: u.Host, sessions: map[*session]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL is u (a postgres:// URL of the proxied server) going through the
// proxy.
func (p *Proxy) URL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	pu.Host = p.ln.Addr().String()
	return pu.String()
}

// Arm sets a one-shot trap: the next statement, on any session, whose text
// satisfies match is cut as cut says. With reset the client's connection
// is reset (RST: "connection reset by peer") instead of closed (FIN:
// "unexpected EOF"). The channel is closed when the trap fires. Arming
// again replaces a trap that has not fired.
func (p *Proxy) Arm(match func(sql string) bool, cut Cut, reset bool) <-chan struct{} {
	tr := &trap{match: match, cut: cut, reset: reset, fired: make(chan struct{})}
	p.mu.Lock()
	p.trap = tr
	p.mu.Unlock()
	return tr.fired
}

// CutAll closes every open session at once, as a server that went away
// does; the next connection works.
func (p *Proxy) CutAll(reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.sessions {
		s.kill(reset)
	}
}

// Close stops the proxy and closes every session.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for s := range p.sessions {
		s.kill(false)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// take returns the armed trap when sql matches it, disarming it.
func (p *Proxy) take(sql string) *trap {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.trap
	if tr == nil || !tr.match(sql) {
		return nil
	}
	p.trap = nil
	return tr
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := p.open(c)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); s.upstream(p) }()
		go func() { defer p.wg.Done(); s.downstream() }()
	}
}

func (p *Proxy) open(c net.Conn) (*session, error) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return nil, err
	}
	s := &session{client: c, server: server, stmts: map[string]string{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = server.Close()
		return nil, errors.New("closed")
	}
	p.sessions[s] = struct{}{}
	s.forget = func() {
		p.mu.Lock()
		delete(p.sessions, s)
		p.mu.Unlock()
	}
	return s, nil
}

// session is one proxied connection.
type session struct {
	client, server net.Conn
	forget         func()

	// stmts maps prepared statement names to their text (upstream only).
	stmts map[string]string

	mu      sync.Mutex
	pending *trap // a fired AfterReply or Stall trap: withhold the reply
	dead    bool
}

// kill closes both connections; with reset the client's is reset.
func (s *session) kill(reset bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return
	}
	s.dead = true
	if tc, ok := s.client.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = s.client.Close()
	_ = s.server.Close()
}

// upstream forwards client messages to the server, springing the trap on
// the statement it matches.
func (s *session) upstream(p *Proxy) {
	defer s.forget()
	defer s.kill(false)
	// The start-up message (or a CancelRequest) has no type byte.
	head := make([]byte, 4)
	if _, err := io.ReadFull(s.client, head); err != nil {
		return
	}
	n := int(binary.BigEndian.Uint32(head))
	if n < 4 {
		return
	}
	first := make([]byte, n) // the length word, then the rest
	copy(first, head)
	if _, err := io.ReadFull(s.client, first[4:]); err != nil {
		return
	}
	if _, err := s.server.Write(first); err != nil {
		return
	}
	for {
		msg, err := readMessage(s.client)
		if err != nil {
			return
		}
		if sql, ok := s.statement(msg); ok {
			if tr := p.take(sql); tr != nil {
				close(tr.fired)
				if tr.cut == BeforeSend {
					s.kill(tr.reset)
					return
				}
				s.mu.Lock()
				s.pending = tr
				s.mu.Unlock()
			}
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
	}
}

// statement returns the text of the statement msg runs: a simple Query, or
// the Bind of a prepared (named or unnamed) statement; it records the
// statements Parse prepares.
func (s *session) statement(msg []byte) (string, bool) {
	payload := msg[5:]
	switch msg[0] {
	case 'Q':
		sql, _ := cstring(payload)
		return sql, true
	case 'P':
		name, rest := cstring(payload)
		sql, _ := cstring(rest)
		s.stmts[name] = sql
	case 'B':
		_, rest := cstring(payload) // portal
		name, _ := cstring(rest)
		sql, ok := s.stmts[name]
		return sql, ok
	}
	return "", false
}

// downstream forwards server messages to the client, withholding them once
// a trap is pending and cutting at its ReadyForQuery.
func (s *session) downstream() {
	defer s.kill(false)
	for {
		msg, err := readMessage(s.server)
		if err != nil {
			return
		}
		s.mu.Lock()
		tr := s.pending
		s.mu.Unlock()
		if tr != nil {
			if msg[0] == 'Z' && tr.cut == AfterReply {
				s.kill(tr.reset)
				return
			}
			continue
		}
		if _, err := s.client.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed protocol message: type, length, payload.
func readMessage(r io.Reader) ([]byte, error) {
	head := make([]byte, 5)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[1:]))
	if n < 4 {
		return nil, errors.New("pgfault: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, head)
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}
