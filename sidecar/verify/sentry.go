package verify

import (
	"crypto/sha256"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Sentry integration-platform webhook headers
// (https://docs.sentry.io/organization/integrations/integration-platform/webhooks/).
const (
	SentrySignatureHeader = "Sentry-Hook-Signature"
	SentryResourceHeader  = "Sentry-Hook-Resource"
	SentryTimestampHeader = "Sentry-Hook-Timestamp"
	SentryRequestIDHeader = "Request-ID"
)

// TypeSentry is the "sentry" provider: webhooks of a Sentry integration
// (internal or public integration-platform app): installation, issue,
// error, comment, event_alert and metric_alert resources.
//
// Verification, per
// https://docs.sentry.io/organization/integrations/integration-platform/webhooks/#verifying-the-signature:
// Sentry-Hook-Signature is the bare hex HMAC-SHA256 (64 digits, no prefix)
// of the raw body keyed with the integration's client secret (several may
// be configured while one is changed). Sentry-Hook-Timestamp (unix
// seconds at send time) is not signed, so there is no replay window.
//
// Identity: Request-ID is a random UUID made for each send (Sentry's
// AppPlatformEvent.sentry_headers,
// https://github.com/getsentry/sentry/blob/master/src/sentry/sentry_apps/api/serializers/app_platform_event.py),
// so it cannot recognise a second send of one event and is not the key.
// ID comes from the signed body:
//   - error: JoinKey("error", data.error.event_id), Sentry's event id;
//   - event_alert: JoinKey("event_alert", data.event.event_id,
//     data.triggered_rule), one alert per event and rule;
//   - installation: JoinKey("installation", installation.uuid, action): an
//     installation is created and deleted once;
//   - every other resource (issue, comment, metric_alert…): "sha256:" and
//     the hex SHA-256 of the body's canonical JSON, so the same payload
//     sent again is one event and any change of state (an issue's status,
//     assignee, counts) another (Digest is set).
//
// Type is Sentry-Hook-Resource and the body's action ("issue.created"),
// Scope installation.uuid, ObjectID the issue id or event id.
//
// Redelivery: Sentry documents no retry policy for these webhooks.
const TypeSentry Type = "sentry"

func init() {
	Register(Provider{
		Type: TypeSentry,
		Name: "Sentry (integration platform)",
		Docs: []string{
			"https://docs.sentry.io/organization/integrations/integration-platform/webhooks/",
			"https://github.com/getsentry/sentry/blob/master/src/sentry/sentry_apps/api/serializers/app_platform_event.py",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &sentryVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{SentrySignatureHeader} },
		Setup:             Setup{Secrets: "the integration's client secret (Settings → Developer Settings → the integration → Client Secret)"},
		Redelivery: Redelivery{
			Key:     "error `event_id`; event_alert `event_id` + `triggered_rule`; installation `uuid` + `action`; else body digest (`Request-ID` is new on every send)",
			Retries: "none documented",
			Horizon: "forever (event ids; digests of the payload)",
			Batches: "no",
			Resends: "any resend gets a new `Request-ID`; claimd keys on the body instead",
		},
	})
}

type sentryVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func (*sentryVerifier) Type() Type { return TypeSentry }

// sentryMAC is Sentry's signature: Sentry-Hook-Signature holds the hex
// HMAC-SHA256 of the body under the integration's client secret.
var sentryMAC = macHeader{
	Name:      SentrySignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *sentryVerifier) Verify(r Request) (Result, error) {
	if e := sentryMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var body struct {
		Action       string `json:"action"`
		Installation struct {
			UUID string `json:"uuid"`
		} `json:"installation"`
		Data struct {
			Error struct {
				EventID flexString `json:"event_id"`
			} `json:"error"`
			Event struct {
				EventID flexString `json:"event_id"`
			} `json:"event"`
			TriggeredRule flexString `json:"triggered_rule"`
			Issue         struct {
				ID flexString `json:"id"`
			} `json:"issue"`
		} `json:"data"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	resource := header(r.Header, SentryResourceHeader)
	if resource == "" {
		return Result{}, authenticated(missingHeader(SentryResourceHeader))
	}
	if body.Action == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/action", "the webhook has no action"))
	}
	typ := resource + "." + body.Action
	ev := Event{Type: typ, Scope: body.Installation.UUID, ObjectID: string(body.Data.Issue.ID)}
	switch {
	case resource == "error" && body.Data.Error.EventID != "":
		ev.ID = JoinKey("error", string(body.Data.Error.EventID))
		ev.ObjectID = string(body.Data.Error.EventID)
	case resource == "event_alert" && body.Data.Event.EventID != "":
		ev.ID = JoinKey("event_alert", string(body.Data.Event.EventID), string(body.Data.TriggeredRule))
		ev.ObjectID = string(body.Data.Event.EventID)
	case resource == "installation" && body.Installation.UUID != "":
		ev.ID = JoinKey("installation", body.Installation.UUID, body.Action)
	default:
		sum, err := strictjson.Hash(strictjson.TrimBOM(r.Body))
		if err != nil {
			return Result{}, authenticated(strictErr(err))
		}
		ev.ID, ev.Digest = "sha256:"+sum, true
	}
	if err := v.types.Check(typ, InHeader, SentryResourceHeader); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{ev}}, nil
}
