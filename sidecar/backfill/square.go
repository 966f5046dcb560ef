package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// squareLister searches a Square seller's events, per
// https://developer.squareup.com/reference/square/events-api/SearchEvents:
// POST /v2/events {limit ≤ 100, cursor, query: {filter: {created_at:
// {start_at, end_at}, location_ids}, sort: {field: DEFAULT, order: DESC}}}
// → {events: [{merchant_id, location_id, type, event_id, created_at,
// data}], metadata, cursor}; a page after the first repeats the query
// with the cursor. Events are searchable for 28 days, and only from when
// searching was enabled for the seller
// (https://developer.squareup.com/docs/events-api/overview: PUT
// /v2/events/enable); an event is keyed from its JSON, which has the
// shape of a webhook notification (event_id, type, merchant_id, data).
// Authentication: a personal access token (the Events API takes no OAuth
// token) as a Bearer token, with Square-Version. Errors and rate limits:
// https://developer.squareup.com/docs/build-basics/handling-errors,
// https://developer.squareup.com/reference/square/objects/ErrorCategory
// (429 RATE_LIMIT_ERROR: backoff with jitter). Square has no redelivery
// API: missed events are fetched from the search.
type squareLister struct {
	c         *Client
	base      string
	key       sources.Secret
	version   string
	locations []string
}

// SquarePageSize is the page size asked of SearchEvents (its maximum).
const SquarePageSize = 100

func (l *squareLister) CanRedeliver(Item, time.Time) bool { return false }

func (l *squareLister) Redeliver(context.Context, Item) error { return ErrNoRedelivery }

func (l *squareLister) Fetch(_ context.Context, it Item) ([]byte, http.Header, error) {
	return it.Body, nil, nil
}

// squareQuery is SearchEvents' query, repeated on every page.
type squareQuery struct {
	Filter struct {
		CreatedAt struct {
			StartAt string `json:"start_at"`
			EndAt   string `json:"end_at"`
		} `json:"created_at"`
		LocationIDs []string `json:"location_ids,omitempty"`
	} `json:"filter"`
	Sort struct {
		Field string `json:"field"`
		Order string `json:"order"`
	} `json:"sort"`
}

func (l *squareLister) List(ctx context.Context, r Range, fn func(Page) error) error {
	var q squareQuery
	q.Filter.CreatedAt.StartAt = r.From.UTC().Format(time.RFC3339)
	q.Filter.CreatedAt.EndAt = r.To.UTC().Format(time.RFC3339)
	q.Filter.LocationIDs = l.locations
	q.Sort.Field, q.Sort.Order = "DEFAULT", "DESC"
	cursor := ""
	for {
		body, err := json.Marshal(struct {
			Cursor string      `json:"cursor,omitempty"`
			Limit  int         `json:"limit"`
			Query  squareQuery `json:"query"`
		}{cursor, SquarePageSize, q})
		if err != nil {
			return err
		}
		resp, err := l.c.Do(ctx, func() (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/v2/events", bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+l.key.Reveal())
			req.Header.Set("Square-Version", l.version)
			req.Header.Set("Content-Type", "application/json")
			return req, nil
		})
		if err != nil {
			return err
		}
		var res struct {
			Events []json.RawMessage `json:"events"`
			Cursor string            `json:"cursor"`
		}
		if err := json.Unmarshal(resp.Body, &res); err != nil {
			return providerFailure("the provider's answer is not a SearchEvents result")
		}
		page := Page{Items: make([]Item, 0, len(res.Events))}
		older := false
		for _, raw := range res.Events {
			var ev struct {
				EventID   string    `json:"event_id"`
				Type      string    `json:"type"`
				CreatedAt time.Time `json:"created_at"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil || ev.EventID == "" {
				return providerFailure("an item of the provider's SearchEvents result is not a Square event")
			}
			created := ev.CreatedAt.UTC()
			// Only [From, To) is judged; an older event ends the search
			// (sorted newest first).
			in, past := page.see(created, r)
			older = older || past
			if !in {
				continue
			}
			page.Items = append(page.Items, Item{ProviderID: ev.EventID, Type: ev.Type, CreatedAt: created, Body: []byte(raw)})
		}
		page.More = res.Cursor != "" && len(res.Events) > 0 && !older
		if err := fn(page); err != nil {
			return err
		}
		if !page.More {
			return nil
		}
		cursor = res.Cursor
	}
}
