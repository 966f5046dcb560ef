package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// GitLabSigningToken is the fixture's GitLab signing token: "whsec_" and
// the base64 of 32 bytes, the shape GitLab issues.
const GitLabSigningToken = "whsec_Z2l0bGFiLWZpeHR1cmUtc2lnbmluZy10b2tlbi0zMmI="

// GitLabDelivery returns the headers GitLab sends with a hook request
// (https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers):
// X-Gitlab-Token (when token is not empty), X-Gitlab-Event, X-Gitlab-Event-UUID,
// Idempotency-Key and, when signingToken is not empty, the Standard
// Webhooks signature headers with webhook-id equal to the idempotency key.
func GitLabDelivery(token, signingToken, event, eventUUID, idempotencyKey string, ts int64, body []byte) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("X-Gitlab-Token", token)
	}
	h.Set("X-Gitlab-Event", event)
	h.Set("X-Gitlab-Event-UUID", eventUUID)
	h.Set("X-Gitlab-Instance", "https://gitlab.example.com")
	h.Set("Idempotency-Key", idempotencyKey)
	if signingToken != "" {
		sig, err := StandardWebhooks(signingToken, idempotencyKey, ts, body)
		if err != nil {
			panic(err)
		}
		h.Set("webhook-id", idempotencyKey)
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sig)
	}
	return h
}

func init() {
	const token = "gitlab-fixture-secret-token"
	RegisterFixture(Fixture{
		Type:    "gitlab",
		Secrets: []string{token},
		Options: map[string]any{"signing_tokens": []any{GitLabSigningToken}},
		Cases: func(now time.Time) Cases {
			ts := now.Unix()
			mr := func(action, updated string) []byte {
				return []byte(`{"object_kind":"merge_request","event_type":"merge_request","project":{"id":15,"path_with_namespace":"mike/diaspora"},"object_attributes":{"id":99,"iid":1,"action":"` + action + `","updated_at":"` + updated + `"}}`)
			}
			open := mr("open", "2026-12-05 04:00:00 UTC")
			update := mr("update", "2026-12-05 04:00:01 UTC")
			d := func(uuid, key string, body []byte) Delivery {
				return Delivery{Header: GitLabDelivery(token, GitLabSigningToken, "Merge Request Hook", uuid, key, ts, body), Body: body}
			}
			tampered := d("7f0c9a1e-0000-4000-8000-000000000003", "b1c2d3e4-0000-4000-8000-000000000003", open)
			tampered.Body = mr("close", "2026-12-05 04:00:00 UTC")
			return Cases{
				Distinct: []Delivery{
					d("7f0c9a1e-0000-4000-8000-000000000001", "b1c2d3e4-0000-4000-8000-000000000001", open),
					d("7f0c9a1e-0000-4000-8000-000000000002", "b1c2d3e4-0000-4000-8000-000000000002", update),
				},
				// A resend from the hook's request history keeps
				// Idempotency-Key; the event UUID of the resend differs.
				Redelivery: []Delivery{
					d("7f0c9a1e-0000-4000-8000-000000000001", "b1c2d3e4-0000-4000-8000-000000000001", open),
					d("7f0c9a1e-0000-4000-8000-0000000000ff", "b1c2d3e4-0000-4000-8000-000000000001", open),
				},
				Tampered: tampered,
			}
		},
	})
}
