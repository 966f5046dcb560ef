package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/standin"
)

// reporter prints what a stand-in finds wrong (a request that does not
// follow the provider's documented shape, a redelivery the ingest door
// refused) to stderr: it is the stand-ins' standin.Reporter.
type reporter struct{ out *syncWriter }

func (r reporter) Errorf(format string, args ...any) { r.out.printf("standin: "+format+"\n", args...) }

// syncWriter serialises lines printed from handlers and the main flow.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}

// delivery is one seeded event as it is (or would have been) delivered.
type delivery struct {
	id     string
	missed bool
	body   []byte
	header http.Header
}

// forwarded is one dispatch claimd made to POST /forward.
type forwarded struct {
	EventID, EventType, Origin string
}

// server is a running stand-in.
type server struct {
	cfg      config
	url      string
	key      string
	keyGiven bool
	out      *syncWriter
	rep      reporter
	http     *http.Server
	served   chan error
	events   []delivery // oldest first

	stripe *standin.Stripe
	github *standin.GitHub
	square *standin.Square
}

// start seeds the provider's stand-in and serves it on cfg.listen (and
// POST /forward beside it).
func start(cfg config, stdout, stderr io.Writer) (*server, error) {
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("-listen: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && !cfg.allowRemote {
		_ = ln.Close()
		return nil, errors.New("-listen resolved to a non-loopback address; use 127.0.0.1:PORT, or add -allow-remote")
	}
	s := &server{cfg: cfg, url: "http://" + ln.Addr().String(), key: cfg.key, keyGiven: cfg.key != "",
		out: &syncWriter{w: stdout}, rep: reporter{out: &syncWriter{w: stderr}}, served: make(chan error, 1)}
	if s.key == "" {
		s.key = newKey(cfg.provider)
	}
	// The stand-in is served on the listener asked for, under its URL
	// (GitHub's Link headers name it; claimd follows a next page on its
	// base_url's origin only).
	var api http.Handler
	switch cfg.provider {
	case "stripe":
		s.stripe = standin.NewStripeAt(s.rep, s.key, s.url)
		api = s.stripe
	case "github":
		s.github = standin.NewGitHubAt(s.rep, s.key, cfg.hook, cfg.secret, s.url)
		s.github.IngestURL = cfg.deliver
		api = s.github
	case "square":
		s.square = standin.NewSquareAt(s.rep, s.key, cfg.squareVersion, s.url)
		api = s.square
	}
	s.seed(time.Now().UTC().Truncate(time.Second))

	mux := http.NewServeMux()
	mux.HandleFunc("POST /forward", s.forward)
	mux.Handle("/", api)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.served <- err
		}
	}()
	return s, nil
}

func (s *server) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		_ = s.http.Close()
	}
}

// newKey returns a random credential in the provider's style (the
// stand-in accepts any string).
func newKey(provider string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	if provider == "stripe" {
		return "rk_test_standin_" + hex.EncodeToString(b)
	}
	return "standin_" + hex.EncodeToString(b)
}

// newUUID returns a random version 4 UUID (RFC 9562).
func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// isMissed spreads missed of n events evenly: event i (0 oldest) is
// missed when the count of missed events grows at i.
func isMissed(i, n, missed int) bool {
	return (i+1)*missed/n != i*missed/n
}

// seed adds the events to the stand-in and prepares their deliveries,
// signed as the provider signs them.
func (s *server) seed(now time.Time) {
	n := s.cfg.events
	run := newUUID()[:8] // ids unique per run: a second run is new events
	for i := range n {
		at := now.Add(-s.cfg.age - time.Duration(n-1-i)*time.Minute)
		missed := isMissed(i, n, s.cfg.missed)
		d := delivery{missed: missed, header: http.Header{}}
		switch s.cfg.provider {
		case "stripe":
			ev := standin.StripeEvent{ID: fmt.Sprintf("evt_standin_%s_%02d", run, i+1), Type: "invoice.paid", Created: at,
				APIVersion: "2024-06-20", Failed: missed,
				Object: map[string]any{"id": fmt.Sprintf("in_standin_%s_%02d", run, i+1), "object": "invoice", "amount_paid": 1000 + i}}
			s.stripe.Add(ev)
			d.id = ev.ID
			if s.cfg.secret != "" {
				var sig string
				d.body, sig = ev.SignedDelivery(s.cfg.secret, time.Now(), "")
				d.header.Set("Content-Type", "application/json")
				d.header.Set("Stripe-Signature", sig)
			}
		case "github":
			repo := "acme/shop"
			if r, ok := strings.CutPrefix(s.cfg.hook, "repos/"); ok {
				repo = r[:strings.LastIndex(r, "/hooks/")]
			}
			status := 200
			if missed {
				status = 502 // the door did not answer: GitHub logs the failure and does not retry
			}
			payload := fmt.Sprintf(`{"action":"opened","issue":{"number":%d,"title":"stand-in issue %d"},"repository":{"full_name":%q}}`,
				i+1, i+1, repo)
			gd := s.github.Add(standin.GitHubDelivery{GUID: newUUID(), DeliveredAt: at, Event: "issues", Action: "opened",
				StatusCode: status, Payload: []byte(payload)})
			d.id = gd.GUID
			if s.cfg.secret != "" {
				d.body, d.header = s.github.Signed(gd)
			}
		case "square":
			ev := standin.SquareEvent{EventID: newUUID(), Type: "payment.updated", MerchantID: "STANDINMERCHANT", LocationID: "STANDINLOCATION",
				CreatedAt: at, DataType: "payment", DataID: fmt.Sprintf("standin_payment_%s_%02d", run, i+1),
				Object: map[string]any{"payment": map[string]any{"id": fmt.Sprintf("standin_payment_%s_%02d", run, i+1),
					"amount_money": map[string]any{"amount": 1000 + i, "currency": "USD"}, "status": "COMPLETED"}}}
			s.square.Add(ev)
			d.id = ev.EventID
			if s.cfg.secret != "" {
				var sig string
				d.body, sig = ev.Notification(s.cfg.notificationURL, s.cfg.secret)
				d.header.Set("Content-Type", "application/json")
				d.header.Set("X-Square-Hmacsha256-Signature", sig)
			}
		}
		s.events = append(s.events, d)
	}
}

// printInfo prints what a sources file needs: the base URL, the key
// (only a generated one), the hook, the forward target, and the seeded
// events.
func (s *server) printInfo() {
	p := s.out.printf
	p("%s stand-in\n", s.cfg.provider)
	p("  base_url   %s   (the source's backfill.base_url)\n", s.url)
	if s.keyGiven {
		p("  read key   as given with -key\n")
	} else {
		p("  read key   %s   (generated; the source's backfill.credentials)\n", s.key)
	}
	switch s.cfg.provider {
	case "github":
		p("  hook       %s   (the source's backfill.github.hook)\n", s.cfg.hook)
	case "square":
		p("  version    %s   (the source's backfill.square.version)\n", s.cfg.squareVersion)
	}
	p("  forward    %s/forward   (a stand-in for n8n: the source's forward.url)\n", s.url)
	p("  seeded     %d events, %d never delivered\n", len(s.events), s.cfg.missed)
	for _, d := range s.events {
		if d.missed {
			p("  never delivered  %s\n", d.id)
		}
	}
}

// deliverAll posts the delivered events to cfg.deliver, oldest first,
// and prints each answer's status.
func (s *server) deliverAll(ctx context.Context) {
	hc := &http.Client{Timeout: 30 * time.Second}
	for _, d := range s.events {
		if d.missed {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.deliver, bytes.NewReader(d.body))
		if err != nil {
			s.out.printf("  delivery of %s failed: %v\n", d.id, err)
			return
		}
		req.Header = d.header.Clone()
		resp, err := hc.Do(req)
		if err != nil {
			s.out.printf("  delivery of %s failed: %v\n", d.id, err)
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		note := ""
		if resp.StatusCode/100 != 2 {
			note = "   (not accepted: is -secret the source's secret, and -deliver its ingest URL?)"
		}
		s.out.printf("  delivered        %s -> %d%s\n", d.id, resp.StatusCode, note)
	}
}

// forward is the stand-in for n8n: it prints the dispatch and answers 200.
func (s *server) forward(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 32<<20))
	f := forwarded{EventID: r.Header.Get("X-Idempotency-Event-Id"), EventType: r.Header.Get("X-Idempotency-Event-Type"),
		Origin: r.Header.Get("X-Idempotency-Origin")}
	origin := f.Origin
	if origin == "" {
		origin = "delivery"
	}
	s.out.printf("  forwarded        %s (%s) origin=%s\n", f.EventID, f.EventType, origin)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"received":true}` + "\n"))
}
