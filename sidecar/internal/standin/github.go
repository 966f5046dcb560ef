package standin

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// GitHub stands in for a repository hook's delivery log, per
//
//   - https://docs.github.com/rest/webhooks/repo-deliveries — GET
//     /repos/{owner}/{repo}/hooks/{hook_id}/deliveries (per_page ≤ 100,
//     cursor; newest first; the next page only through the Link header's
//     rel="next"), GET …/deliveries/{delivery_id} (request.headers,
//     request.payload), POST …/deliveries/{delivery_id}/attempts (202);
//   - https://docs.github.com/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks
//     — a redelivery keeps the GUID, only for deliveries of the past 3
//     days (here 422 after that);
//   - https://docs.github.com/webhooks/using-webhooks/validating-webhook-deliveries
//     — a delivery carries X-Hub-Signature-256 (HMAC-SHA256 of the body
//     under the hook's secret), X-GitHub-Delivery, X-GitHub-Event and
//     X-GitHub-Hook-ID;
//   - https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api
//     — a rate limit answers 403 or 429 with retry-after (FailNext429:
//     403, GitHub's more common form).
//
// A redelivery really POSTs the signed delivery to IngestURL (claimd's
// ingest door) before the stand-in answers 202. A GitHub is the API's
// http.Handler.
type GitHub struct {
	// api's URL is the base URL the stand-in is served at (claimd's
	// base_url; the Link headers' next pages are under it).
	api[GitHubRequest]
	token  string
	hook   string // "repos/o/r/hooks/1"
	hookID string
	secret string
	// IngestURL receives redeliveries.
	IngestURL string
	// PageSize caps the pages the stand-in answers (besides per_page).
	PageSize int
	// Now is the stand-in's clock (redelivery window); nil time.Now.
	Now func() time.Time

	rows      []GitHubDelivery
	nextID    int64
	readOnly  bool
	endless   bool
	attempted []int64
}

// GitHubDelivery is one row of the delivery log.
type GitHubDelivery struct {
	ID          int64
	GUID        string
	DeliveredAt time.Time
	Event       string
	Action      string
	StatusCode  int
	Redelivery  bool
	// Payload is the JSON the delivery carried.
	Payload []byte
}

// GitHubRequest is a request the stand-in got.
type GitHubRequest struct {
	Method, Path  string
	Query         map[string][]string
	Authorization string
	Status        int
}

// NewGitHub starts the stand-in for hook (repos/OWNER/REPO/hooks/ID) on
// a loopback server of its own until t ends; token is the accepted
// token, secret the hook's webhook secret.
func NewGitHub(t TestReporter, token, hook, secret string) *GitHub {
	g := NewGitHubAt(t, token, hook, secret, "")
	g.URL = serveTest(t, g)
	return g
}

// NewGitHubAt returns the stand-in for the caller to serve at baseURL;
// the rest as NewGitHub, r is told what it finds wrong.
func NewGitHubAt(r Reporter, token, hook, secret, baseURL string) *GitHub {
	return &GitHub{api: api[GitHubRequest]{URL: baseURL, t: r}, token: token, hook: hook, hookID: hook[strings.LastIndexByte(hook, '/')+1:],
		secret: secret, PageSize: 100, nextID: 1000}
}

// Add appends a delivery to the log (an id is given when zero) and
// returns it.
func (g *GitHub) Add(d GitHubDelivery) GitHubDelivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d.ID == 0 {
		g.nextID++
		d.ID = g.nextID
	}
	if d.StatusCode == 0 {
		d.StatusCode = 200
	}
	g.rows = append(g.rows, d)
	return d
}

// ReadOnly makes the token one without write permission on webhooks
// from now on: deliveries are still listed and read, and a redelivery is
// refused 403 "Resource not accessible by personal access token", as
// GitHub answers a fine-grained token with "Webhooks: read" only.
func (g *GitHub) ReadOnly(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.readOnly = on
}

// Endless makes the list a broken one from now on (a provider bug or a
// hostile server): every page is empty and links a next one.
func (g *GitHub) Endless(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endless = on
}

// Attempts returns the delivery ids redelivered so far.
func (g *GitHub) Attempts() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int64(nil), g.attempted...)
}

// Signed returns d as GitHub delivers it to the hook: body and headers.
func (g *GitHub) Signed(d GitHubDelivery) ([]byte, http.Header) {
	m := hmac.New(sha256.New, []byte(g.secret))
	m.Write(d.Payload)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "GitHub-Hookshot/standin")
	h.Set("X-GitHub-Delivery", d.GUID)
	h.Set("X-GitHub-Event", d.Event)
	h.Set("X-GitHub-Hook-ID", g.hookID)
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	return d.Payload, h
}

func (g *GitHub) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// ServeHTTP answers the delivery log's routes under /{hook}/deliveries.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	rec := GitHubRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Authorization: r.Header.Get("Authorization")}
	var post *GitHubDelivery
	answer := func(status int, v any) {
		rec.Status = status
		g.requests = append(g.requests, rec)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("X-GitHub-Request-Id", fmt.Sprintf("STANDIN:%04d", len(g.requests)))
		w.WriteHeader(status)
		if v != nil {
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	defer func() {
		g.mu.Unlock()
		if post != nil {
			g.deliver(*post)
		}
	}()
	base := "/" + g.hook + "/deliveries"
	if !strings.HasPrefix(r.URL.Path, base) {
		g.t.Errorf("github stand-in: %s %s is not under %s", r.Method, r.URL.Path, base)
		answer(404, map[string]any{"message": "Not Found"})
		return
	}
	if r.Header.Get("X-GitHub-Api-Version") == "" || !strings.Contains(r.Header.Get("Accept"), "application/vnd.github") {
		g.t.Errorf("github stand-in: Accept and X-GitHub-Api-Version are expected")
	}
	if g.rateLimited(w) {
		answer(403, map[string]any{"message": "You have exceeded a secondary rate limit."})
		return
	}
	if _, ok := g.bearer(rec.Authorization, g.token); !ok {
		answer(401, map[string]any{"message": "Bad credentials"})
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, base)
	switch {
	case rest == "" && r.Method == http.MethodGet:
		g.list(w, r, answer)
	case strings.HasSuffix(rest, "/attempts") && r.Method == http.MethodPost && g.readOnly:
		answer(403, map[string]any{"message": "Resource not accessible by personal access token"})
	case strings.HasSuffix(rest, "/attempts") && r.Method == http.MethodPost:
		d := g.find(strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/attempts"))
		if d == nil {
			answer(404, map[string]any{"message": "Not Found"})
			return
		}
		if g.now().Sub(d.DeliveredAt) >= 72*time.Hour {
			answer(422, map[string]any{"message": "Redelivery is only possible for deliveries of the past 3 days"})
			return
		}
		g.attempted = append(g.attempted, d.ID)
		g.nextID++
		re := *d
		re.ID, re.Redelivery, re.DeliveredAt = g.nextID, true, g.now()
		g.rows = append(g.rows, re)
		post = &re
		answer(202, map[string]any{})
	case r.Method == http.MethodGet:
		d := g.find(strings.TrimPrefix(rest, "/"))
		if d == nil {
			answer(404, map[string]any{"message": "Not Found"})
			return
		}
		_, h := g.Signed(*d)
		hs := map[string]string{}
		for k := range h {
			hs[k] = h.Get(k)
		}
		answer(200, map[string]any{"id": d.ID, "guid": d.GUID, "delivered_at": d.DeliveredAt.UTC().Format(time.RFC3339),
			"redelivery": d.Redelivery, "status_code": d.StatusCode, "event": d.Event, "action": d.Action,
			"request":  map[string]any{"headers": hs, "payload": json.RawMessage(d.Payload)},
			"response": map[string]any{"headers": map[string]string{}, "payload": ""}})
	default:
		g.t.Errorf("github stand-in: unexpected %s %s", r.Method, r.URL.Path)
		answer(404, map[string]any{"message": "Not Found"})
	}
}

// deliver POSTs a redelivery to IngestURL, signed, outside the lock
// (claimd may call the stand-in meanwhile).
func (g *GitHub) deliver(d GitHubDelivery) {
	body, h := g.Signed(d)
	req, err := http.NewRequest(http.MethodPost, g.IngestURL, bytes.NewReader(body))
	if err != nil {
		g.t.Errorf("github stand-in: redelivery: %v", err)
		return
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Errorf("github stand-in: redelivery: %v", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		g.t.Errorf("github stand-in: the ingest door answered the redelivery %d", resp.StatusCode)
	}
}

func (g *GitHub) find(id string) *GitHubDelivery {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil
	}
	for i := range g.rows {
		if g.rows[i].ID == n {
			return &g.rows[i]
		}
	}
	return nil
}

func (g *GitHub) list(w http.ResponseWriter, r *http.Request, answer func(int, any)) {
	q := r.URL.Query()
	per := 30
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			g.t.Errorf("github stand-in: per_page must be 1…100, got %q", v)
		}
		per = n
	}
	per = min(per, g.PageSize)
	if g.endless {
		next := *r.URL
		nq := next.Query()
		nq.Set("cursor", "v1_"+strconv.Itoa(len(g.requests)))
		next.RawQuery = nq.Encode()
		w.Header().Add("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.URL, next.RequestURI()))
		answer(200, []map[string]any{})
		return
	}
	rows := append([]GitHubDelivery(nil), g.rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].ID > rows[j].ID }) // newest first
	start := 0
	if c := q.Get("cursor"); c != "" {
		after, err := strconv.ParseInt(strings.TrimPrefix(c, "v1_"), 10, 64)
		if err != nil {
			answer(422, map[string]any{"message": "Invalid cursor"})
			return
		}
		for start < len(rows) && rows[start].ID >= after {
			start++
		}
	}
	end := min(len(rows), start+per)
	page := rows[start:end]
	if end < len(rows) {
		next := *r.URL
		nq := next.Query()
		nq.Set("cursor", "v1_"+strconv.FormatInt(page[len(page)-1].ID, 10))
		nq.Set("per_page", strconv.Itoa(per))
		next.RawQuery = nq.Encode()
		w.Header().Add("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.URL, next.RequestURI()))
	}
	out := make([]map[string]any, len(page))
	for i, d := range page {
		out[i] = map[string]any{"id": d.ID, "guid": d.GUID, "delivered_at": d.DeliveredAt.UTC().Format(time.RFC3339),
			"redelivery": d.Redelivery, "duration": 0.05, "status": http.StatusText(d.StatusCode), "status_code": d.StatusCode,
			"event": d.Event, "action": d.Action, "installation_id": nil, "repository_id": 1}
	}
	answer(200, out)
}
