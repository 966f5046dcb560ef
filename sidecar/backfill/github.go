package backfill

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// githubLister lists a hook's deliveries, per
// https://docs.github.com/rest/webhooks/repo-deliveries (and
// https://docs.github.com/rest/orgs/webhooks for orgs/ORG/hooks/ID):
//
//   - GET /{hook}/deliveries?per_page=100 returns the newest deliveries
//     first: [{id, guid, delivered_at, redelivery, status_code, event,
//     action, …}]; the next page only through the Link header's
//     rel="next" URL (a cursor), followed only on the API's own origin;
//     GitHub has no time filter, so the list is read until a delivery
//     older than the range;
//   - GET /{hook}/deliveries/{id} returns request.headers and
//     request.payload, the delivery as it was sent;
//   - POST /{hook}/deliveries/{id}/attempts redelivers it (202), keeping
//     its GUID, for deliveries of the past 3 days
//     (https://docs.github.com/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks).
//
// The key is the GUID (X-GitHub-Delivery), shared by all redeliveries of
// a delivery: list rows are grouped by it, and the status GitHub shows
// is not trusted (a 2xx answered by a proxy that lost the event is still
// missed). Authentication: a token with Webhooks read (list) and write
// (attempts) as a Bearer token; rate limits per
// https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api
// (Client.GitHub).
type githubLister struct {
	c      *Client
	base   *url.URL
	hook   string
	hookID string
	key    sources.Secret
}

// GitHubRedeliveryWindow is how old a delivery GitHub still redelivers.
const GitHubRedeliveryWindow = 3 * 24 * time.Hour

func newGitHubLister(c *Client, b *sources.Backfill) (*githubLister, error) {
	u, err := url.Parse(b.BaseURL)
	if err != nil {
		return nil, err
	}
	return &githubLister{c: c, base: u, hook: b.GitHubHook, hookID: b.GitHubHook[strings.LastIndexByte(b.GitHubHook, '/')+1:],
		key: b.Credentials[0]}, nil
}

func (l *githubLister) request(ctx context.Context, method, u string) (Response, error) {
	return l.c.Do(ctx, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+l.key.Reveal())
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		return req, nil
	})
}

func (l *githubLister) path(p string) string {
	return strings.TrimSuffix(l.base.String(), "/") + "/" + l.hook + "/deliveries" + p
}

type githubDelivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	Redelivery  bool      `json:"redelivery"`
	StatusCode  int       `json:"status_code"`
	Event       string    `json:"event"`
	Action      string    `json:"action"`
}

func (l *githubLister) List(ctx context.Context, r Range, fn func(Page) error) error {
	next := l.path("?per_page=100")
	if r.Cursor != "" {
		// A stored position that is not this hook's list on the API's
		// own origin (the hook or base_url changed) is not followed: the
		// list is read from its start instead, judging [From, To) only.
		if u, ok := l.resume(r.Cursor); ok && u != "" {
			next = u
		} else {
			l.c.Log.Warn().Str("source", l.c.Source).Msg("backfill: the stored list position is not this hook's delivery list; listing from the start")
		}
	}
	seen := map[string]bool{}
	for next != "" {
		resp, err := l.request(ctx, http.MethodGet, next)
		if err != nil {
			return err
		}
		var rows []githubDelivery
		if err := json.Unmarshal(resp.Body, &rows); err != nil {
			return providerFailure("the provider's delivery list is not a GitHub delivery list")
		}
		page := Page{}
		older := false
		// Group by GUID: the first row seen of a GUID (the newest) stands
		// for it; CreatedAt is its oldest row's on the page.
		idx := map[string]int{}
		for _, d := range rows {
			if d.GUID == "" || d.ID == 0 {
				return providerFailure("an item of the provider's delivery list is not a GitHub delivery")
			}
			at := d.DeliveredAt.UTC()
			in, past := page.see(at, r)
			older = older || past
			if !in {
				continue
			}
			ok2xx := d.StatusCode >= 200 && d.StatusCode < 300
			if i, dup := idx[d.GUID]; dup {
				it := &page.Items[i]
				if at.Before(it.CreatedAt) {
					it.CreatedAt = at
				}
				it.Failed = it.Failed && !ok2xx
				continue
			}
			if seen[d.GUID] {
				continue
			}
			seen[d.GUID] = true
			h := http.Header{}
			h.Set(verify.GitHubDeliveryHeader, d.GUID)
			h.Set(verify.GitHubEventHeader, d.Event)
			h.Set(verify.GitHubHookIDHeader, l.hookID)
			idx[d.GUID] = len(page.Items)
			page.Items = append(page.Items, Item{ProviderID: d.GUID, DeliveryID: d.ID, Type: d.Event, CreatedAt: at,
				Failed: !ok2xx, Header: h})
		}
		next = ""
		if !older {
			next = l.sameOrigin(LinkNext(resp.Header.Values("Link")))
		}
		page.More = next != ""
		if page.More {
			page.Next = l.cursorOf(next)
		}
		// Every page is handed on, an empty one too (all its rows in the
		// grace, or none at all), so that backfill.max_pages bounds the
		// requests a scan makes whatever the list's Link headers say.
		if err := fn(page); err != nil {
			return err
		}
	}
	return nil
}

// cursorOf is the stored form of a next-page URL already checked to be
// on the API's origin: its path and query only (no scheme, host or
// userinfo, so no credential), or "" when the query names a credential.
func (l *githubLister) cursorOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	for k := range p.Query() {
		switch strings.ToLower(k) {
		case "access_token", "token", "client_secret", "key":
			return ""
		}
	}
	return p.RequestURI()
}

// resume turns a stored cursor (cursorOf) back into a URL on the API's
// own origin, and only when its path is a delivery list of this hook id
// under the API's base path (GitHub's Link may name the repository by
// id, /repositories/ID/hooks/HOOK/deliveries, rather than by name);
// false for anything else (a changed hook, a tampered row).
func (l *githubLister) resume(c string) (string, bool) {
	if !strings.HasPrefix(c, "/") || strings.HasPrefix(c, "//") {
		return "", false
	}
	p, err := url.Parse(c)
	if err != nil || p.Scheme != "" || p.Host != "" || p.User != nil || strings.Contains(p.Path, "/../") {
		return "", false
	}
	basePath := strings.TrimSuffix(l.base.Path, "/")
	if !strings.HasPrefix(p.Path, basePath+"/") || !strings.HasSuffix(p.Path, "/hooks/"+l.hookID+"/deliveries") {
		return "", false
	}
	u := *l.base
	u.Path, u.RawPath, u.RawQuery, u.Fragment, u.User = p.Path, p.RawPath, p.RawQuery, "", nil
	return l.sameOrigin(u.String()), true
}

// sameOrigin returns u when it is on the API's own origin (the token is
// never sent elsewhere), else "" (the list ends).
func (l *githubLister) sameOrigin(u string) string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil || p.Scheme != l.base.Scheme || p.Host != l.base.Host || p.User != nil {
		return ""
	}
	return p.String()
}

// LinkNext returns the URL of the rel="next" link of Link header values
// (RFC 8288: `<url>; rel="next", <url>; rel="last"`), or "".
func LinkNext(values []string) string {
	for _, v := range values {
		for len(v) > 0 {
			v = strings.TrimLeft(v, " \t,")
			if !strings.HasPrefix(v, "<") {
				return ""
			}
			end := strings.IndexByte(v, '>')
			if end < 0 {
				return ""
			}
			target := v[1:end]
			v = v[end+1:]
			params := v
			if i := strings.IndexByte(v, ','); i >= 0 {
				params, v = v[:i], v[i:]
			} else {
				v = ""
			}
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
					continue
				}
				for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(val), `"`)) {
					if strings.EqualFold(rel, "next") {
						return target
					}
				}
			}
		}
	}
	return ""
}

func (l *githubLister) Fetch(ctx context.Context, it Item) ([]byte, http.Header, error) {
	resp, err := l.request(ctx, http.MethodGet, l.path("/"+strconv.FormatInt(it.DeliveryID, 10)))
	if err != nil {
		return nil, nil, err
	}
	var d struct {
		GUID    string `json:"guid"`
		Request struct {
			Headers map[string]string `json:"headers"`
			Payload json.RawMessage   `json:"payload"`
		} `json:"request"`
	}
	if err := json.Unmarshal(resp.Body, &d); err != nil || len(d.Request.Payload) == 0 || d.GUID != it.ProviderID {
		return nil, nil, providerFailure("the provider's delivery detail is not a GitHub delivery of the listed GUID")
	}
	h := http.Header{}
	for k, v := range d.Request.Headers {
		h.Set(k, v)
	}
	// The payload is returned as JSON, whatever content type the hook
	// delivers (a form-encoded hook sent payload=<JSON>): it is stored
	// and forwarded as the JSON it is.
	h.Set("Content-Type", "application/json")
	if h.Get(verify.GitHubDeliveryHeader) == "" {
		h.Set(verify.GitHubDeliveryHeader, d.GUID)
	}
	return []byte(d.Request.Payload), h, nil
}

func (l *githubLister) CanRedeliver(it Item, now time.Time) bool {
	return it.DeliveryID != 0 && now.Sub(it.CreatedAt) < GitHubRedeliveryWindow
}

func (l *githubLister) Redeliver(ctx context.Context, it Item) error {
	if it.DeliveryID == 0 {
		return ErrNoRedelivery
	}
	_, err := l.request(ctx, http.MethodPost, l.path("/"+strconv.FormatInt(it.DeliveryID, 10)+"/attempts"))
	return err
}
