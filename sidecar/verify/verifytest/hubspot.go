package verifytest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HubSpotSecret is the client secret of the "hubspot" fixture.
const HubSpotSecret = "hubspot-fixture-client-secret-0123"

// HubSpotURL is the webhook target of the "hubspot" fixture, as configured
// in HubSpot; its query holds an escape HubSpot decodes before signing.
const HubSpotURL = "https://hooks.example.com/hubspot?source=crm%3Amain"

// HubSpotV3 returns an X-HubSpot-Signature-v3 value: the base64
// HMAC-SHA256 of method + uri + body + timestamp, uri as signed (escapes
// already decoded)
// (https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests#validate-the-v3-request-signature).
func HubSpotV3(secret, method, uri string, body []byte, timestamp string) string {
	return base64.StdEncoding.EncodeToString(mac([]byte(secret), []byte(method+uri), body, []byte(timestamp)))
}

// HubSpotDelivery returns a POST of body to HubSpotURL signed at at.
func HubSpotDelivery(secret string, at time.Time, body []byte) Delivery {
	ts := strconv.FormatInt(at.UnixMilli(), 10)
	uri := strings.ReplaceAll(HubSpotURL, "%3A", ":")
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-HubSpot-Request-Timestamp", ts)
	h.Set("X-HubSpot-Signature-v3", HubSpotV3(secret, "POST", uri, body, ts))
	h.Set("X-HubSpot-Signature-Version", "v1")
	h.Set("X-HubSpot-Signature", "0000000000000000000000000000000000000000000000000000000000000000")
	return Delivery{Header: h, Body: body}
}

// HubSpotItem returns one notification of a batch.
func HubSpotItem(eventID int64, typ string, objectID int64, attempt int) string {
	return fmt.Sprintf(`{"eventId":%d,"subscriptionId":234567,"portalId":62515,"appId":54321,"occurredAt":1764931200000,"subscriptionType":%q,"attemptNumber":%d,"objectId":%d,"changeSource":"CRM","propertyName":"lifecyclestage","propertyValue":"customer"}`, eventID, typ, attempt, objectID)
}

// HubSpotBatch returns a notification array of items.
func HubSpotBatch(items ...string) []byte { return []byte("[" + strings.Join(items, ",") + "]") }

func init() {
	RegisterFixture(Fixture{
		Type:    "hubspot",
		Secrets: []string{HubSpotSecret},
		Options: map[string]any{"url": HubSpotURL},
		Cases: func(now time.Time) Cases {
			retry := func(attempt int) []byte {
				return HubSpotBatch(HubSpotItem(3001, "contact.propertyChange", 123, attempt), HubSpotItem(3002, "contact.propertyChange", 124, attempt))
			}
			tampered := HubSpotDelivery(HubSpotSecret, now, HubSpotBatch(HubSpotItem(4001, "contact.creation", 123, 0)))
			tampered.Body = HubSpotBatch(HubSpotItem(4001, "contact.deletion", 123, 0))
			return Cases{
				Distinct: []Delivery{
					HubSpotDelivery(HubSpotSecret, now, HubSpotBatch(HubSpotItem(1001, "contact.creation", 123, 0), HubSpotItem(1002, "contact.propertyChange", 123, 0))),
					HubSpotDelivery(HubSpotSecret, now, HubSpotBatch(HubSpotItem(1003, "contact.propertyChange", 123, 0), HubSpotItem(1004, "contact.deletion", 123, 0))),
				},
				Redelivery: []Delivery{
					HubSpotDelivery(HubSpotSecret, now.Add(-2*time.Minute), retry(0)),
					HubSpotDelivery(HubSpotSecret, now, retry(1)),
				},
				Tampered:          tampered,
				EventsPerDelivery: 2,
			}
		},
	})
}
