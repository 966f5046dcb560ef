package verifytest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// DiscordKey is the fixtures' application signing key (derived from a fixed
// seed, so its public half can stand in the fixture's options).
var DiscordKey = ed25519.NewKeyFromSeed(func() []byte {
	s := sha256.Sum256([]byte("idempotent-claim discord fixture key"))
	return s[:]
}())

// DiscordPublicKey returns the hex public key of priv, as Discord's
// developer portal shows it.
func DiscordPublicKey(priv ed25519.PrivateKey) string {
	return hex.EncodeToString(priv.Public().(ed25519.PublicKey))
}

// Discord returns the X-Signature-Ed25519 value: the hex Ed25519
// signature of timestamp + body
// (https://docs.discord.com/developers/interactions/overview#setting-up-an-endpoint-validating-security-request-headers).
func Discord(priv ed25519.PrivateKey, timestamp string, body []byte) string {
	return hex.EncodeToString(ed25519.Sign(priv, append([]byte(timestamp), body...)))
}

// DiscordDelivery returns body signed by priv at unix time at.
func DiscordDelivery(priv ed25519.PrivateKey, at time.Time, body []byte) Delivery {
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Discord-Interactions/1.0 (+https://discord.com)")
	h.Set("X-Signature-Ed25519", Discord(priv, ts, body))
	h.Set("X-Signature-Timestamp", ts)
	return Delivery{Header: h, Body: body}
}

// DiscordCommand returns an APPLICATION_COMMAND interaction body.
func DiscordCommand(id string) []byte {
	return []byte(`{"app_permissions":"442368","application_id":"1100000000000000000","channel_id":"1200000000000000000","data":{"id":"1300000000000000000","name":"refund","options":[{"name":"order","type":3,"value":"A-1001"}],"type":1},"guild_id":"1400000000000000000","id":"` + id + `","locale":"en-US","member":{"user":{"id":"1500000000000000000","username":"nelly"}},"token":"aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDp0b2tlbg","type":2,"version":1}`)
}

// DiscordWebhookEvent returns a webhook event body (type 1).
func DiscordWebhookEvent(eventType, user, timestamp string) []byte {
	return []byte(`{"version":1,"application_id":"1100000000000000000","type":1,"event":{"type":"` + eventType + `","timestamp":"` + timestamp + `","data":{"integration_type":1,"scopes":["applications.commands"],"user":{"id":"` + user + `","username":"nelly","discriminator":"0","global_name":null,"avatar":null}}}}`)
}

func init() {
	opts := map[string]any{"public_keys": []string{DiscordPublicKey(DiscordKey)}}
	RegisterFixture(Fixture{
		Type:    "discord",
		Options: opts,
		Cases: func(now time.Time) Cases {
			tampered := DiscordDelivery(DiscordKey, now, DiscordCommand("1600000000000000009"))
			tampered.Body = DiscordCommand("1600000000000000008")
			return Cases{
				Distinct: []Delivery{
					DiscordDelivery(DiscordKey, now, DiscordCommand("1600000000000000001")),
					DiscordDelivery(DiscordKey, now, DiscordCommand("1600000000000000002")),
				},
				// Discord does not retry interactions: these are one
				// interaction delivered twice (a replay inside the window).
				Redelivery: []Delivery{
					DiscordDelivery(DiscordKey, now.Add(-time.Second), DiscordCommand("1600000000000000003")),
					DiscordDelivery(DiscordKey, now, DiscordCommand("1600000000000000003")),
				},
				Tampered: tampered,
				// An APPLICATION_COMMAND is answered
				// DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE.
				Reply: []byte(`{"type":5}`),
				Handshakes: []Handshake{{
					Delivery: DiscordDelivery(DiscordKey, now, []byte(`{"application_id":"1100000000000000000","id":"1600000000000000000","token":"aW50ZXJhY3Rpb24","type":1,"user":{"id":"1500000000000000000"},"version":1}`)),
					Status:   http.StatusOK,
					Body:     []byte(`{"type":1}`),
				}},
			}
		},
	})
	RegisterFixture(Fixture{
		Type:    "discord-events",
		Options: opts,
		Cases: func(now time.Time) Cases {
			ev := DiscordWebhookEvent("APPLICATION_AUTHORIZED", "1500000000000000001", "2024-10-18T14:42:53.064834")
			tampered := DiscordDelivery(DiscordKey, now, ev)
			tampered.Body = DiscordWebhookEvent("APPLICATION_AUTHORIZED", "1500000000000000666", "2024-10-18T14:42:53.064834")
			return Cases{
				Distinct: []Delivery{
					DiscordDelivery(DiscordKey, now, ev),
					DiscordDelivery(DiscordKey, now, DiscordWebhookEvent("APPLICATION_AUTHORIZED", "1500000000000000002", "2024-10-18T14:42:53.064834")),
				},
				Redelivery: []Delivery{
					DiscordDelivery(DiscordKey, now.Add(-time.Minute), DiscordWebhookEvent("ENTITLEMENT_CREATE", "1500000000000000003", "2024-10-18T14:43:00.000000")),
					DiscordDelivery(DiscordKey, now, DiscordWebhookEvent("ENTITLEMENT_CREATE", "1500000000000000003", "2024-10-18T14:43:00.000000")),
				},
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: DiscordDelivery(DiscordKey, now, []byte(`{"version":1,"application_id":"1100000000000000000","type":0}`)),
					Status:   http.StatusNoContent,
					Body:     []byte{},
				}},
			}
		},
	})
}
