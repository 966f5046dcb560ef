package verify

import (
	"crypto/sha256"
	"strconv"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// ClickUpSignatureHeader carries ClickUp's webhook signature
// (https://developer.clickup.com/docs/webhooksignature).
const ClickUpSignatureHeader = "X-Signature"

// TypeClickUp is ClickUp webhooks.
const TypeClickUp Type = "clickup"

// The "clickup" provider verifies ClickUp webhooks, per
// https://developer.clickup.com/docs/webhooksignature:
//
//   - X-Signature is the hex HMAC-SHA256 of the raw body keyed with the
//     webhook's secret (webhook.secret, returned when the webhook is
//     created); several secrets may be configured (one per webhook, or old
//     and new while a webhook is recreated);
//   - ClickUp signs no timestamp: no replay window.
//
// The body names the webhook, the event and the object
// (https://developer.clickup.com/docs/webhooks): {"webhook_id", "event":
// "taskStatusUpdated", "task_id", "history_items": [{"id", …}]}. ClickUp
// sends no delivery or event id; a history item id names one recorded
// change. Key rule: ID is JoinKey(webhook_id, event, history item ids in
// body order…); an event without history items (some list, folder, space
// and goal events) is keyed JoinKey(webhook_id, event, "sha256:" and the
// hex SHA-256 of the body's canonical JSON). Type is "event", Scope
// webhook_id, ObjectID the first of task_id, list_id, folder_id, space_id,
// goal_id present.
//
// Redelivery (https://developer.clickup.com/docs/webhookhealth): a
// delivery not answered 2xx within 7 seconds is retried up to five times,
// with the same body, hence the same key; then the event is dropped for
// good and the webhook's fail_count grows, and at 100 the webhook is
// suspended. A 401 or 410 answer suspends the webhook at once: a source
// whose secret is wrong (its refusals are 401) suspends the ClickUp
// webhook on the first delivery, which must then be set active again with
// PUT /api/v2/webhook/{webhook_id}.
type clickupVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeClickUp,
		Name: "ClickUp",
		Docs: []string{
			"https://developer.clickup.com/docs/webhooksignature",
			"https://developer.clickup.com/docs/webhooks",
			"https://developer.clickup.com/docs/webhookhealth",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &clickupVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{ClickUpSignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's `secret`, returned by the API when the webhook was created"},
		Redelivery: Redelivery{
			Key:     "`webhook_id` + `event` + the `history_items` ids (no history items: + body digest)",
			Retries: "up to 5 retries per event, then dropped; 100 dropped events, a 401 or a 410 suspend the webhook",
			Horizon: "forever (history item ids name one change)",
			Batches: "no (one event, possibly several history items, one record)",
			Resends: "no",
		},
	})
}

func (*clickupVerifier) Type() Type { return TypeClickUp }

// clickupMAC is ClickUp's signature: X-Signature holds the hex
// HMAC-SHA256 of the body under the webhook's secret.
var clickupMAC = macHeader{
	Name:      ClickUpSignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits",
	Mismatch:  "signature does not match the body under any configured webhook secret",
}

func (v *clickupVerifier) Verify(r Request) (Result, error) {
	if e := clickupMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var ev struct {
		WebhookID    string     `json:"webhook_id"`
		Event        string     `json:"event"`
		TaskID       flexString `json:"task_id"`
		ListID       flexString `json:"list_id"`
		FolderID     flexString `json:"folder_id"`
		SpaceID      flexString `json:"space_id"`
		GoalID       flexString `json:"goal_id"`
		HistoryItems []struct {
			ID flexString `json:"id"`
		} `json:"history_items"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.WebhookID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/webhook_id", "the event has no webhook_id"))
	}
	if ev.Event == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event", "the event has no event name"))
	}
	if err := v.types.Check(ev.Event, InBody, "/event"); err != nil {
		return Result{}, err
	}
	parts := []string{ev.WebhookID, ev.Event}
	for i, h := range ev.HistoryItems {
		if h.ID == "" {
			return Result{}, authenticated(bodyErr(CodeMissingField, "/history_items/"+strconv.Itoa(i)+"/id", "a history item has no id"))
		}
		parts = append(parts, string(h.ID))
	}
	if len(ev.HistoryItems) == 0 {
		sum, err := strictjson.Hash(strictjson.TrimBOM(r.Body))
		if err != nil {
			return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "body is not strict JSON"))
		}
		parts = append(parts, "sha256:"+sum)
	}
	obj := ""
	for _, o := range []flexString{ev.TaskID, ev.ListID, ev.FolderID, ev.SpaceID, ev.GoalID} {
		if o != "" {
			obj = string(o)
			break
		}
	}
	return Result{Events: []Event{{ID: JoinKey(parts...), Type: ev.Event, Scope: ev.WebhookID, ObjectID: obj}}}, nil
}
