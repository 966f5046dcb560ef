package verifytest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"hash/crc32"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// PayPalWebhookID is the webhook id of the "paypal" fixture.
const PayPalWebhookID = "8PT597110X687430LN"

// PayPalCertURL is the PAYPAL-CERT-URL the fixture's deliveries name.
const PayPalCertURL = "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a1b2c3d4"

var paypalKey = struct {
	once sync.Once
	priv *rsa.PrivateKey
	pem  string
}{}

// PayPalKey returns the fixture's signing key and its self-signed
// certificate in PEM (CN messageverificationcerts.paypal.com, valid from
// 2000 to 2099), made once per process.
func PayPalKey() (*rsa.PrivateKey, string) {
	paypalKey.once.Do(func() {
		priv, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic("verifytest: " + err.Error())
		}
		paypalKey.priv = priv
		paypalKey.pem = PayPalCertificate(priv, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2099, 12, 31, 0, 0, 0, 0, time.UTC))
	})
	return paypalKey.priv, paypalKey.pem
}

// PayPalCertificate returns a self-signed certificate for priv's key,
// valid from notBefore to notAfter, in PEM.
func PayPalCertificate(priv *rsa.PrivateKey, notBefore, notAfter time.Time) string {
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(notBefore.Unix()),
		Subject:      pkix.Name{CommonName: "messageverificationcerts.paypal.com"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		panic("verifytest: " + err.Error())
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// PayPal returns a PAYPAL-TRANSMISSION-SIG value: the base64 SHA256withRSA
// signature of "<transmission id>|<transmission time>|<webhook id>|<crc32
// of body in decimal>"
// (https://developer.paypal.com/api/rest/webhooks/rest/#link-selfverificationmethod).
func PayPal(priv *rsa.PrivateKey, transmissionID, transmissionTime, webhookID string, body []byte) string {
	signed := transmissionID + "|" + transmissionTime + "|" + webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	d := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(nil, priv, crypto.SHA256, d[:])
	if err != nil {
		panic("verifytest: " + err.Error())
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// PayPalDelivery returns a PayPal transmission of body: transmission id
// tid at at, signed with priv for webhookID, naming certURL.
func PayPalDelivery(priv *rsa.PrivateKey, webhookID, certURL, tid string, at time.Time, body []byte) Delivery {
	ts := at.UTC().Format(time.RFC3339)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Paypal-Transmission-Id", tid)
	h.Set("Paypal-Transmission-Time", ts)
	h.Set("Paypal-Transmission-Sig", PayPal(priv, tid, ts, webhookID, body))
	h.Set("Paypal-Cert-Url", certURL)
	h.Set("Paypal-Auth-Algo", "SHA256withRSA")
	h.Set("Paypal-Auth-Version", "v2")
	return Delivery{Header: h, Body: body}
}

// PayPalCapture returns an event body: event id of type typ about capture
// capture in state status.
func PayPalCapture(id, typ, capture, status string, at time.Time) []byte {
	return []byte(`{"id":"` + id + `","event_version":"1.0","create_time":"` + at.UTC().Format("2006-01-02T15:04:05.000Z") +
		`","resource_type":"capture","resource_version":"2.0","event_type":"` + typ + `","summary":"Payment ` + status + ` for $ 7.47 USD","resource":{"id":"` + capture +
		`","status":"` + status + `","amount":{"currency_code":"USD","value":"7.47"},"final_capture":true,"seller_protection":{"status":"ELIGIBLE"}},"links":[{"href":"https://api.paypal.com/v1/notifications/webhooks-events/` + id + `","rel":"self","method":"GET"}]}`)
}

func init() {
	RegisterFixture(Fixture{
		Type: "paypal",
		Setup: func(TB) map[string]any {
			_, cert := PayPalKey()
			return map[string]any{"webhook_id": PayPalWebhookID, "certificates": []any{cert}}
		},
		Cases: func(now time.Time) Cases {
			priv, _ := PayPalKey()
			send := func(tid string, at time.Time, body []byte) Delivery {
				return PayPalDelivery(priv, PayPalWebhookID, PayPalCertURL, tid, at, body)
			}
			completed := PayPalCapture("WH-58D329510W468432D-8HN650336L201105X", "PAYMENT.CAPTURE.COMPLETED", "42311647XV020574X", "completed", now)
			refunded := PayPalCapture("WH-1GE84257G0350133W-6RW800890C634293G", "PAYMENT.CAPTURE.REFUNDED", "42311647XV020574X", "refunded", now)
			retried := PayPalCapture("WH-2WR32451HC0233532-67976317FL4543714", "PAYMENT.CAPTURE.DENIED", "7NW873794T343360M", "denied", now)
			tampered := send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0009", now, retried)
			tampered.Body = PayPalCapture("WH-2WR32451HC0233532-67976317FL4543714", "PAYMENT.CAPTURE.DENIED", "7NW873794T343360N", "denied", now)
			return Cases{
				// One capture, completed then refunded.
				Distinct: []Delivery{
					send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0001", now, completed),
					send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0002", now, refunded),
				},
				// The same event in new transmissions (new id, time and
				// signature) and the first transmission sent again as it
				// was, two days later (PayPal does not document which a
				// retry is).
				Redelivery: []Delivery{
					send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0003", now.Add(-48*time.Hour), retried),
					send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0004", now.Add(-time.Minute), retried),
					send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0005", now, retried),
					send("9b4d1c50-1f4e-11f1-9e4e-7b5a0e1c0003", now.Add(-48*time.Hour), retried),
				},
				Tampered: tampered,
			}
		},
	})
}
