package standin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// Stripe stands in for Stripe's GET /v1/events, per
//
//   - https://docs.stripe.com/api/events/list — created[gte], created[lt]
//     (unix seconds), limit 1…100 (default 10), starting_after (an event
//     id: the page after it), types[] (at most 20), delivery_success;
//     newest first; {"object":"list","url":"/v1/events","has_more":…,"data":[…]};
//   - https://docs.stripe.com/api/events/object — the Event object
//     (id, object, api_version, created, data.object, livemode,
//     pending_webhooks, request, type);
//   - https://docs.stripe.com/keys/restricted-api-keys — a restricted key
//     (rk_…) with Events: Read, as Authorization: Bearer;
//   - https://docs.stripe.com/error-low-level — a 401 answers
//     {"error":{"type":"invalid_request_error","message":"Invalid API Key provided: rk_…****"}},
//     quoting part of the key (which claimd must never echo);
//   - https://docs.stripe.com/rate-limits — a 429, here with Retry-After
//     when the test asks for one.
//
// Every request is checked against that shape (the Reporter's Errorf
// names what is wrong) and recorded. A Stripe is the API's http.Handler.
type Stripe struct {
	api[StripeRequest]
	key string

	events  []StripeEvent
	fail5xx []int
	ignore  bool
	// PageSize caps the page the stand-in answers (besides limit).
	PageSize int
}

// StripeEvent is a seeded event: its fields, and its data object.
type StripeEvent struct {
	ID         string
	Type       string
	Created    time.Time
	APIVersion string
	// Object is data.object.
	Object map[string]any
	// Failed: its delivery failed (pending_webhooks 1,
	// delivery_success=false lists it).
	Failed bool
}

// StripeRequest is a request the stand-in got.
type StripeRequest struct {
	Query         map[string][]string
	Authorization string
	Status        int
}

// NewStripe starts the stand-in on a loopback server of its own until t
// ends; key is the restricted key it accepts.
func NewStripe(t TestReporter, key string) *Stripe {
	s := NewStripeAt(t, key, "")
	s.URL = serveTest(t, s)
	return s
}

// NewStripeAt returns the stand-in for the caller to serve at baseURL;
// key is the restricted key it accepts, r is told what it finds wrong.
func NewStripeAt(r Reporter, key, baseURL string) *Stripe {
	return &Stripe{api: api[StripeRequest]{URL: baseURL, t: r}, key: key, PageSize: 100}
}

// Add seeds events.
func (s *Stripe) Add(evs ...StripeEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, evs...)
}

// FailNext5xx makes the next n requests answer status (a 5xx, as
// Stripe's API answers an outage: {"error":{"type":"api_error"}}).
func (s *Stripe) FailNext5xx(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fail5xx = append(s.fail5xx, status)
	}
}

// IgnoreRange makes the list ignore created[gte] and created[lt] from now
// on (a provider bug): every event is listed, newest first.
func (s *Stripe) IgnoreRange(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignore = on
}

// JSON renders ev as Stripe's Event object. apiVersion, when not empty,
// overrides the event's own version: a webhook endpoint pinned to another
// version gets another rendering of the same event.
func (ev StripeEvent) JSON(apiVersion string) []byte {
	v := ev.APIVersion
	if apiVersion != "" {
		v = apiVersion
	}
	pending := 0
	if ev.Failed {
		pending = 1
	}
	obj := map[string]any{}
	for k, val := range ev.Object {
		obj[k] = val
	}
	if apiVersion != "" && apiVersion != ev.APIVersion {
		obj["rendered_for"] = apiVersion // what another version would change
	}
	b, err := json.Marshal(map[string]any{
		"id": ev.ID, "object": "event", "api_version": v, "created": ev.Created.Unix(),
		"data": map[string]any{"object": obj}, "livemode": false, "pending_webhooks": pending,
		"request": map[string]any{"id": nil, "idempotency_key": nil}, "type": ev.Type,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// SignedDelivery is ev as Stripe's webhook would deliver it to an
// endpoint with signing secret secret at time at
// (https://docs.stripe.com/webhooks#verify-manually): the body and the
// Stripe-Signature header. apiVersion as for JSON.
func (ev StripeEvent) SignedDelivery(secret string, at time.Time, apiVersion string) (body []byte, sig string) {
	body = ev.JSON(apiVersion)
	ts := strconv.FormatInt(at.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return body, "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// ServeHTTP answers GET /v1/events.
func (s *Stripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := r.URL.Query()
	rec := StripeRequest{Query: q, Authorization: r.Header.Get("Authorization")}
	answer := func(status int, v any) {
		rec.Status = status
		s.requests = append(s.requests, rec)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", fmt.Sprintf("req_standin%04d", len(s.requests)))
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		s.t.Errorf("stripe stand-in: %s %s is not GET /v1/events", r.Method, r.URL.Path)
		answer(404, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": "Unrecognized request URL"}})
		return
	}
	if s.rateLimited(w) {
		answer(429, map[string]any{"error": map[string]any{"type": "rate_limit_error", "message": "Too many requests"}})
		return
	}
	if len(s.fail5xx) > 0 {
		st := s.fail5xx[0]
		s.fail5xx = s.fail5xx[1:]
		answer(st, map[string]any{"error": map[string]any{"type": "api_error", "message": "stand-in outage " + rec.Authorization}})
		return
	}
	if key, ok := s.bearer(rec.Authorization, s.key); !ok {
		shown := key
		if len(shown) > 8 {
			shown = shown[:8] + "****" + shown[len(shown)-4:]
		}
		answer(401, map[string]any{"error": map[string]any{"type": "invalid_request_error",
			"message": "Invalid API Key provided: " + shown}})
		return
	}
	gte, err1 := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lt, err2 := strconv.ParseInt(q.Get("created[lt]"), 10, 64)
	if err1 != nil || err2 != nil {
		s.t.Errorf("stripe stand-in: created[gte] and created[lt] must be unix seconds (claimd always bounds the window), got %v", q)
	}
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			s.t.Errorf("stripe stand-in: limit must be 1…100, got %q", v)
			answer(400, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": "Invalid limit"}})
			return
		}
		limit = n
	}
	limit = min(limit, s.PageSize)
	if len(q["types[]"]) > 20 {
		s.t.Errorf("stripe stand-in: at most 20 types[]")
	}
	evs := append([]StripeEvent(nil), s.events...)
	sort.SliceStable(evs, func(i, j int) bool {
		if !evs[i].Created.Equal(evs[j].Created) {
			return evs[i].Created.After(evs[j].Created)
		}
		return evs[i].ID > evs[j].ID
	})
	var sel []StripeEvent
	for _, ev := range evs {
		c := ev.Created.Unix()
		if !s.ignore && (c < gte || c >= lt) {
			continue
		}
		if ts := q["types[]"]; len(ts) > 0 && !contains(ts, ev.Type) {
			continue
		}
		if q.Get("delivery_success") == "false" && !ev.Failed {
			continue
		}
		sel = append(sel, ev)
	}
	if after := q.Get("starting_after"); after != "" {
		i := 0
		for i < len(sel) && sel[i].ID != after {
			i++
		}
		if i == len(sel) {
			answer(400, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": "No such event"}})
			return
		}
		sel = sel[i+1:]
	}
	more := len(sel) > limit
	if more {
		sel = sel[:limit]
	}
	data := make([]json.RawMessage, len(sel))
	for i, ev := range sel {
		data[i] = ev.JSON("")
	}
	answer(200, map[string]any{"object": "list", "url": "/v1/events", "has_more": more, "data": data})
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
