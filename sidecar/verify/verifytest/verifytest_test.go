package verifytest

import (
	"net/url"
	"testing"
)

// Published vectors (see shared/cases/CASES.md, "Published vectors").
func TestPublishedVectors(t *testing.T) {
	t.Parallel()
	check := func(name, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %s, want %s", name, got, want)
		}
	}
	check("github", GitHub("It's a Secret to Everybody", []byte("Hello, World!")),
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	sw, err := StandardWebhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	check("standard-webhooks", sw, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	if _, err := StandardWebhooks("whsec_!!!!", "m", 1, nil); err == nil {
		t.Error("a non-base64 secret must fail")
	}
	slackBody := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	check("slack", Slack("8f742231b10e8888abcd99yyyzzz85a5", 1531420618, []byte(slackBody)),
		"v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675309"}, "Digits": {"1234"}, "From": {"+14158675309"}, "To": {"+18005551212"}}
	check("twilio", Twilio("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params), "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
	check("twilio repeated", Twilio("12345", "https://mycompany.com/myapp.php?foo=1&bar=2",
		url.Values{"Sid": {"CA123"}, "SidAccount": {"AC123"}, "Digits": {"5678", "1234"}}), "IK+Dwps556ElfBT0I3Rgjkr1wJU=")
	check("zoom crc", HexHMACSHA256("secretValueTest", []byte("qgg8vlvZRS6UYooatFL8Aw")),
		"70c1f2e2e6ca2d39297490d1f9142c7d701415ea8e6151f6562a08fa657a40ff")
	check("paddle", Paddle(1671552777, []byte(`{"event_id":"evt_01hv8x2acma2gz3he4ggs0r1ij","event_type":"transaction.completed","occurred_at":"2024-04-12T10:18:49.621022Z","notification_id":"ntf_01hv8x2af8dfxv2dhxmj8nqtxs","data":{"id":"txn_01hv8wptq8987qeep44cyrewp9","status":"completed"}}`), "pdl_ntfset_FAKE_0000000000000000000000000000_secret"),
		"ts=1671552777;h1=f3992345b573c8481a94839856ce0cc1419b70709f21efee5d5fcd3ad491f325")
}
