package httpapi_test

import (
	"bytes"
	"hash/crc32"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestIngestPayPalForgedBodyUnderCapturedTransmission: PayPal's signature
// covers the body only through its CRC32
// (https://developer.paypal.com/api/rest/webhooks/rest/), so whoever
// holds one captured transmission can write another body with the same
// CRC32 (here: a new event id and amount, plus 48 characters of padding
// chosen by solving the CRC's linear equations) that verifies under the
// captured signature. claimd records each transmission id with the events
// it carried and refuses it under other events: the forged body is
// refused with nothing stored, while the captured transmission itself
// sent again (a retry) is still a duplicate.
func TestIngestPayPalForgedBodyUnderCapturedTransmission(t *testing.T) {
	t.Parallel()
	const webhook = "8PT597110X687430LKGECATA"
	priv, cert := verifytest.PayPalKey()
	e := setupIngest(t, `
sources:
  pp: {tenant: acme, provider: paypal, options: {webhook_id: "`+webhook+`", certificates: ["${PAYPAL_CERT}"]}, `+unusedForward+`}
`, ingestOptions{env: map[string]string{"PAYPAL_CERT": cert}})
	at := time.Now()
	original := verifytest.PayPalCapture("WH-ORIG-1", "PAYMENT.CAPTURE.COMPLETED", "CAP-1", "COMPLETED", at)
	captured := verifytest.PayPalDelivery(priv, webhook, verifytest.PayPalCertURL, "tx-captured-1", at, original)

	send := func(d verifytest.Delivery) ingestAnswer {
		t.Helper()
		return e.sendFixture(t, "pp", d)
	}
	a := send(captured)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, "accepted", rs[0].Status)

	forgedBody := forgeCRC32(t, bytes.Replace(
		verifytest.PayPalCapture("WH-FORGED-1", "PAYMENT.CAPTURE.COMPLETED", "CAP-1", "COMPLETED", at),
		[]byte(`"value":"7.47"`), []byte(`"value":"9999.00"`), 1), crc32.ChecksumIEEE(original))
	forged := verifytest.Delivery{Header: captured.Header.Clone(), Body: forgedBody}
	// The forgery verifies as far as the signature goes.
	v, err := verify.New(verify.TypePayPal, verify.Core{}, &verify.PayPalOptions{WebhookID: webhook, Certificates: []string{cert}})
	require.NoError(t, err)
	res, err := v.Verify(verify.Request{Header: forged.Header, Body: forged.Body})
	require.NoError(t, err, "the CRC32 matches: PayPal's signature holds for the forged body")
	require.Equal(t, "WH-FORGED-1", res.Events[0].ID)

	before := e.counts(t, "pp")
	a = send(forged)
	require.Equal(t, http.StatusUnauthorized, a.status, "the captured transmission under other events: %s", a.body)
	require.NotContains(t, string(a.body), "WH-FORGED-1")
	require.Equal(t, before, e.counts(t, "pp"), "nothing stored for the forgery")

	a = send(captured)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	rs, _ = a.receipts(t)
	require.Equal(t, "duplicate", rs[0].Status, "the captured transmission itself again is a retry")
}

// forgeCRC32 appends a "pad" member of 48 '0'/'1' characters to the JSON
// object body, chosen so that the result's CRC32 is want. For messages of
// one length CRC32 is affine over GF(2): flipping a set of input bits
// changes the checksum by the XOR of each bit's own change, so the pad is
// found by Gaussian elimination.
func forgeCRC32(t *testing.T, body []byte, want uint32) []byte {
	t.Helper()
	const n = 48
	end := bytes.LastIndexByte(body, '}')
	require.Positive(t, end)
	pad := []byte(`,"pad":"` + string(bytes.Repeat([]byte{'0'}, n)) + `"`)
	base := append(append(append([]byte{}, body[:end]...), pad...), body[end:]...)
	at := end + len(`,"pad":"`)
	c0 := crc32.ChecksumIEEE(base)
	type row struct {
		v uint32
		m uint64
	}
	var basis [32]*row
	for i := 0; i < n; i++ {
		b := append([]byte{}, base...)
		b[at+i] = '1'
		r := row{crc32.ChecksumIEEE(b) ^ c0, 1 << i}
		for bit := 31; bit >= 0; bit-- {
			if r.v>>bit&1 == 0 {
				continue
			}
			if basis[bit] == nil {
				basis[bit] = &row{r.v, r.m}
				break
			}
			r.v ^= basis[bit].v
			r.m ^= basis[bit].m
		}
	}
	v, m := c0^want, uint64(0)
	for bit := 31; bit >= 0; bit-- {
		if v>>bit&1 == 0 {
			continue
		}
		require.NotNil(t, basis[bit], "no pad reaches that CRC32")
		v ^= basis[bit].v
		m ^= basis[bit].m
	}
	for i := 0; i < n; i++ {
		if m>>i&1 == 1 {
			base[at+i] = '1'
		}
	}
	require.Equal(t, want, crc32.ChecksumIEEE(base))
	return base
}
