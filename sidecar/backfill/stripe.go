package backfill

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// stripeLister lists a Stripe account's events, per
// https://docs.stripe.com/api/events/list: GET /v1/events with
// created[gte] and created[lt] (unix seconds), limit (at most 100),
// starting_after (the last id of the previous page; the list is newest
// first) and, with only_failed, delivery_success=false; the answer is
// {object: "list", data: [Event…], has_more}. Each item is a whole Event
// object (https://docs.stripe.com/api/events/object), rendered at the
// event's own api_version: it is keyed from that JSON, and is what a
// fetch stores. Authentication: a restricted key with Events: Read
// (https://docs.stripe.com/keys/restricted-api-keys) as a Bearer token.
// Rate limits: https://docs.stripe.com/rate-limits; errors:
// https://docs.stripe.com/error-low-level (a 401's message quotes part of
// the key: never read). Stripe has no redelivery API: missed events are
// fetched.
type stripeLister struct {
	c        *Client
	base     string
	key      sources.Secret
	failed   bool
	pageSize int
}

// StripePageSize is the page size asked of GET /v1/events (its maximum).
const StripePageSize = 100

func (l *stripeLister) CanRedeliver(Item, time.Time) bool { return false }

func (l *stripeLister) Redeliver(context.Context, Item) error { return ErrNoRedelivery }

func (l *stripeLister) Fetch(_ context.Context, it Item) ([]byte, http.Header, error) {
	return it.Body, nil, nil
}

func (l *stripeLister) List(ctx context.Context, r Range, fn func(Page) error) error {
	after := ""
	for {
		q := url.Values{}
		q.Set("created[gte]", strconv.FormatInt(r.From.Unix(), 10))
		q.Set("created[lt]", strconv.FormatInt(r.To.Unix(), 10))
		q.Set("limit", strconv.Itoa(l.pageSize))
		if after != "" {
			q.Set("starting_after", after)
		}
		if l.failed {
			q.Set("delivery_success", "false")
		}
		u := l.base + "/v1/events?" + q.Encode()
		resp, err := l.c.Do(ctx, func() (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+l.key.Reveal())
			return req, nil
		})
		if err != nil {
			return err
		}
		var list struct {
			Object  string            `json:"object"`
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(resp.Body, &list); err != nil || list.Object != "list" {
			return providerFailure("the provider's event list is not a Stripe list object")
		}
		page := Page{Items: make([]Item, 0, len(list.Data))}
		older, last := false, ""
		for _, raw := range list.Data {
			var ev struct {
				ID              string `json:"id"`
				Type            string `json:"type"`
				Created         int64  `json:"created"`
				PendingWebhooks int    `json:"pending_webhooks"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil || ev.ID == "" {
				return providerFailure("an item of the provider's event list is not a Stripe event")
			}
			last = ev.ID
			created := time.Unix(ev.Created, 0).UTC()
			// The list is asked for [From, To) only; an event outside it
			// (a list that ignored the filter) is not judged, and one
			// older than From ends the list (newest first).
			in, past := page.see(created, r)
			older = older || past
			if !in {
				continue
			}
			page.Items = append(page.Items, Item{ProviderID: ev.ID, Type: ev.Type, CreatedAt: created,
				Failed: ev.PendingWebhooks > 0, Body: []byte(raw)})
		}
		page.More = list.HasMore && last != "" && !older
		if err := fn(page); err != nil {
			return err
		}
		if !page.More {
			return nil
		}
		after = last
	}
}
