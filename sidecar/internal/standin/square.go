package standin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Square stands in for Square's SearchEvents, per
//
//   - https://developer.squareup.com/reference/square/events-api/SearchEvents
//     — POST /v2/events {cursor, limit ≤ 100, query: {filter:
//     {event_types, merchant_ids, location_ids, created_at: {start_at,
//     end_at}}, sort: {field: DEFAULT, order: DESC}}} → {events: […],
//     metadata: […], cursor}; a later page repeats the original query with
//     the cursor (the stand-in refuses one that does not);
//   - https://developer.squareup.com/docs/events-api/overview — events are
//     kept 28 days; the Events API takes a personal access token;
//   - https://developer.squareup.com/docs/build-basics/handling-errors and
//     https://developer.squareup.com/reference/square/objects/ErrorCategory
//     — 401 {"errors":[{"category":"AUTHENTICATION_ERROR","code":"UNAUTHORIZED",…}]},
//     429 RATE_LIMIT_ERROR / RATE_LIMITED;
//   - https://developer.squareup.com/docs/webhooks/step3validate — a
//     notification is signed with x-square-hmacsha256-signature, the base64
//     HMAC-SHA256 of the notification URL followed by the body.
//
// A Square is the API's http.Handler.
type Square struct {
	api[SquareRequest]
	token   string
	version string
	// PageSize caps the pages the stand-in answers (besides limit).
	PageSize int

	events  []SquareEvent
	ignore  bool
	queries map[string]json.RawMessage // cursor → the query it belongs to
}

// SquareEvent is a seeded event.
type SquareEvent struct {
	EventID, Type, MerchantID, LocationID string
	CreatedAt                             time.Time
	// DataType and DataID are data.type and data.id; Object data.object.
	DataType, DataID string
	Object           map[string]any
}

// SquareRequest is a request the stand-in got.
type SquareRequest struct {
	Cursor        string
	Query         json.RawMessage
	Authorization string
	Status        int
}

// NewSquare starts the stand-in on a loopback server of its own until t
// ends; token is the accepted access token, version the Square-Version
// it expects.
func NewSquare(t TestReporter, token, version string) *Square {
	s := NewSquareAt(t, token, version, "")
	s.URL = serveTest(t, s)
	return s
}

// NewSquareAt returns the stand-in for the caller to serve at baseURL;
// the rest as NewSquare, r is told what it finds wrong.
func NewSquareAt(r Reporter, token, version, baseURL string) *Square {
	return &Square{api: api[SquareRequest]{URL: baseURL, t: r}, token: token, version: version, PageSize: 100, queries: map[string]json.RawMessage{}}
}

// Add seeds events.
func (s *Square) Add(evs ...SquareEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, evs...)
}

// IgnoreRange makes the search ignore query.filter.created_at from now
// on (a provider bug): every event is found, newest first.
func (s *Square) IgnoreRange(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignore = on
}

func (ev SquareEvent) data() map[string]any {
	return map[string]any{"type": ev.DataType, "id": ev.DataID, "object": ev.Object}
}

// JSON is ev as SearchEvents lists it.
func (ev SquareEvent) JSON() []byte {
	b, err := json.Marshal(map[string]any{"merchant_id": ev.MerchantID, "location_id": ev.LocationID, "type": ev.Type,
		"event_id": ev.EventID, "created_at": ev.CreatedAt.UTC().Format(time.RFC3339Nano), "data": ev.data()})
	if err != nil {
		panic(err)
	}
	return b
}

// Notification is ev as a webhook subscription delivers it to
// notificationURL, signed with signatureKey: the body (without
// location_id, fields in the notification's own order: other bytes than
// the search's) and the signature header value.
func (ev SquareEvent) Notification(notificationURL, signatureKey string) (body []byte, sig string) {
	d, _ := json.Marshal(ev.data())
	body = []byte(fmt.Sprintf(`{"merchant_id":%q,"type":%q,"event_id":%q,"created_at":%q,"data":%s}`,
		ev.MerchantID, ev.Type, ev.EventID, ev.CreatedAt.UTC().Format(time.RFC3339), d))
	m := hmac.New(sha256.New, []byte(signatureKey))
	m.Write([]byte(notificationURL))
	m.Write(body)
	return body, base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// ServeHTTP answers POST /v2/events.
func (s *Square) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := SquareRequest{Authorization: r.Header.Get("Authorization")}
	answer := func(status int, v any) {
		rec.Status = status
		s.requests = append(s.requests, rec)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Square-Request-Id", "standin-"+strconv.Itoa(len(s.requests)))
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	errs := func(category, code string) map[string]any {
		return map[string]any{"errors": []map[string]any{{"category": category, "code": code, "detail": "stand-in"}}}
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v2/events" {
		s.t.Errorf("square stand-in: %s %s is not POST /v2/events", r.Method, r.URL.Path)
		answer(404, errs("INVALID_REQUEST_ERROR", "NOT_FOUND"))
		return
	}
	if v := r.Header.Get("Square-Version"); v != s.version {
		s.t.Errorf("square stand-in: Square-Version %q, want %q", v, s.version)
	}
	var body struct {
		Cursor string          `json:"cursor"`
		Limit  int             `json:"limit"`
		Query  json.RawMessage `json:"query"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		answer(400, errs("INVALID_REQUEST_ERROR", "BAD_REQUEST"))
		return
	}
	rec.Cursor, rec.Query = body.Cursor, body.Query
	if s.rateLimited(w) {
		answer(429, errs("RATE_LIMIT_ERROR", "RATE_LIMITED"))
		return
	}
	if _, ok := s.bearer(rec.Authorization, s.token); !ok {
		answer(401, errs("AUTHENTICATION_ERROR", "UNAUTHORIZED"))
		return
	}
	if body.Limit < 1 || body.Limit > 100 {
		s.t.Errorf("square stand-in: limit must be 1…100, got %d", body.Limit)
	}
	var q struct {
		Filter struct {
			CreatedAt struct {
				StartAt time.Time `json:"start_at"`
				EndAt   time.Time `json:"end_at"`
			} `json:"created_at"`
			LocationIDs []string `json:"location_ids"`
			EventTypes  []string `json:"event_types"`
		} `json:"filter"`
		Sort struct {
			Field string `json:"field"`
			Order string `json:"order"`
		} `json:"sort"`
	}
	if err := json.Unmarshal(body.Query, &q); err != nil || q.Filter.CreatedAt.StartAt.IsZero() || q.Filter.CreatedAt.EndAt.IsZero() {
		s.t.Errorf("square stand-in: query.filter.created_at.start_at and end_at are expected (RFC 3339)")
		answer(400, errs("INVALID_REQUEST_ERROR", "INVALID_VALUE"))
		return
	}
	if q.Sort.Field != "DEFAULT" || q.Sort.Order != "DESC" {
		s.t.Errorf("square stand-in: sort DEFAULT DESC expected, got %+v", q.Sort)
	}
	offset := 0
	if body.Cursor != "" {
		first, ok := s.queries[body.Cursor]
		if !ok {
			answer(400, errs("INVALID_REQUEST_ERROR", "INVALID_CURSOR"))
			return
		}
		var a, b any
		_ = json.Unmarshal(first, &a)
		_ = json.Unmarshal(body.Query, &b)
		if !reflect.DeepEqual(a, b) {
			s.t.Errorf("square stand-in: a cursor page must repeat the original query")
			answer(400, errs("INVALID_REQUEST_ERROR", "INVALID_CURSOR"))
			return
		}
		offset, _ = strconv.Atoi(strings.TrimPrefix(body.Cursor, "cur-"))
	}
	evs := append([]SquareEvent(nil), s.events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].CreatedAt.After(evs[j].CreatedAt) })
	var sel []SquareEvent
	for _, ev := range evs {
		if !s.ignore && (ev.CreatedAt.Before(q.Filter.CreatedAt.StartAt) || !ev.CreatedAt.Before(q.Filter.CreatedAt.EndAt)) {
			continue
		}
		if len(q.Filter.LocationIDs) > 0 && !contains(q.Filter.LocationIDs, ev.LocationID) {
			continue
		}
		sel = append(sel, ev)
	}
	limit := min(body.Limit, s.PageSize)
	end := min(len(sel), offset+limit)
	page := sel[min(offset, len(sel)):end]
	out := map[string]any{}
	items := make([]json.RawMessage, len(page))
	meta := make([]map[string]any, len(page))
	for i, ev := range page {
		items[i] = ev.JSON()
		meta[i] = map[string]any{"event_id": ev.EventID, "api_version": s.version}
	}
	out["events"], out["metadata"] = items, meta
	if end < len(sel) {
		c := "cur-" + strconv.Itoa(end)
		s.queries[c] = body.Query
		out["cursor"] = c
	}
	answer(200, out)
}
