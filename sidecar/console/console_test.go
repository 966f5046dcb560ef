package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// staticPrefix is how a configured key is named in the delivery log.
func staticPrefix(key string) string {
	h := sha256.Sum256([]byte(key))
	return "static:" + hex.EncodeToString(h[:4])
}

func TestSignInSessionCookieAndSignOut(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	b := e.browser(t)

	r := b.get("/ui/")
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/ui/signin", r.location())

	page := b.get("/ui/signin")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, `id="signin-form"`)
	pre := strings.ToLower(page.setCookie("claimd_signin"))
	require.Contains(t, pre, "httponly")
	require.Contains(t, pre, "samesite=strict")
	require.Contains(t, pre, "path=/ui")

	r = b.post("/ui/signin", url.Values{"api_key": {keyA}, "csrf": {csrf(t, page.body)}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	cookie := strings.ToLower(r.setCookie("claimd_session"))
	require.NotEmpty(t, cookie)
	for _, attr := range []string{"httponly", "samesite=strict", "path=/ui", "expires="} {
		require.Contains(t, cookie, attr)
	}
	require.NotContains(t, cookie, "secure", "plain HTTP without SecureCookie")
	token := b.cookies["claimd_session"]
	require.Len(t, token, 43)
	var stored int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM console_sessions WHERE id = sha256($1::bytea)`,
		[]byte(token)).Scan(&stored))
	require.Equal(t, 1, stored, "only the token's SHA-256 is stored")

	home := b.get("/ui/")
	require.Equal(t, http.StatusOK, home.status)
	require.Contains(t, home.body, `id="whoami-tenant">`+tenantA+`<`)
	require.Contains(t, home.body, staticPrefix(keyA))
	require.Contains(t, home.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Contains(t, home.header.Get("Content-Security-Policy"), "default-src 'none'")
	require.NotContains(t, home.header.Get("Content-Security-Policy"), "script-src")
	require.Equal(t, "DENY", home.header.Get("X-Frame-Options"))
	require.Equal(t, "no-store", home.header.Get("Cache-Control"))
	require.Equal(t, "same-origin", home.header.Get("Referrer-Policy"))
	css := b.get("/ui/assets/console.css")
	require.Equal(t, http.StatusOK, css.status)
	require.Contains(t, css.header.Get("Content-Type"), "text/css")

	r = b.post("/ui/signout", url.Values{"csrf": {csrf(t, home.body)}})
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/ui/signin", r.location())
	require.NotContains(t, b.cookies, "claimd_session")
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM console_sessions`).Scan(&stored))
	require.Equal(t, 0, stored)

	// The old cookie, sent again, is refused.
	old := e.browser(t)
	old.cookies["claimd_session"] = token
	r = old.get("/ui/")
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/ui/signin", r.location())
	r = old.post("/ui/signout", url.Values{"csrf": {"x"}})
	require.Equal(t, http.StatusSeeOther, r.status)
}

func TestSecureCookieSetting(t *testing.T) {
	t.Parallel()
	e := setup(t, options{secure: true})
	b := e.browser(t)
	r := b.signInReply(keyA)
	require.Equal(t, http.StatusSeeOther, r.status, e.logs.String())
	require.Contains(t, strings.ToLower(r.setCookie("claimd_session")), "; secure")
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	idle, absolute := e.browser(t), e.browser(t)
	idle.signIn(keyA)
	absolute.signIn(keyA)
	_, err := e.pool.Exec(e.ctx, `UPDATE console_sessions SET idle_until = now() - interval '1 second'
		WHERE id = sha256($1::bytea)`, []byte(idle.cookies["claimd_session"]))
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE console_sessions SET expires_at = now() - interval '1 second'
		WHERE id = sha256($1::bytea)`, []byte(absolute.cookies["claimd_session"]))
	require.NoError(t, err)
	for _, b := range []*browser{idle, absolute} {
		r := b.get("/ui/claims")
		require.Equal(t, http.StatusSeeOther, r.status)
		require.Equal(t, "/ui/signin", r.location())
	}
}

func TestWrongKeyRefusedAndRateLimited(t *testing.T) {
	t.Parallel()
	e := setup(t, options{failureLimit: 3})
	b := e.browser(t)
	wrong := "ick_" + strings.Repeat("A", 43)
	for i := 0; i < 3; i++ {
		r := b.signInReply(wrong)
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		require.Contains(t, r.body, `data-code="unauthorized"`)
		require.NotContains(t, r.body, wrong)
		require.Empty(t, r.setCookie("claimd_session"))
	}
	r := b.signInReply(wrong)
	require.Equal(t, http.StatusTooManyRequests, r.status, r.body)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	require.Contains(t, r.body, `data-code="rate_limited"`)
	// A configured key is still checked (as on /v1).
	b.signIn(keyA)

	// An admin key is no console key.
	r = e.browser(t).signInReply(keyAdmin)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	require.Equal(t, []string{"api_key"}, texts(r.body, "error-field"))
	require.NotContains(t, r.body, keyAdmin)
}

func TestSignInFormIsCSRFProtected(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	b := e.browser(t)
	page := b.get("/ui/signin")
	tok := csrf(t, page.body)
	for name, form := range map[string]url.Values{
		"no token":    {"api_key": {keyA}},
		"other token": {"api_key": {keyA}, "csrf": {tok + "x"}},
	} {
		r := b.post("/ui/signin", form)
		require.Equal(t, http.StatusForbidden, r.status, name)
		require.Contains(t, r.body, `data-code="forbidden"`, name)
	}
	// The token without its cookie (another browser) is refused.
	r := e.browser(t).post("/ui/signin", url.Values{"api_key": {keyA}, "csrf": {tok}})
	require.Equal(t, http.StatusForbidden, r.status)
	for _, h := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
		{"Origin": "null"}, {"Origin": "null", "Sec-Fetch-Site": "same-site"}, {"Origin": e.base, "Sec-Fetch-Site": "same-site"}} {
		b.header = h
		r := b.post("/ui/signin", url.Values{"api_key": {keyA}, "csrf": {tok}})
		require.Equal(t, http.StatusForbidden, r.status, h)
	}
	// Same origin, as a browser sends it: accepted; also with the origin
	// hidden ("null", as Chromium sends it under a no-referrer policy) when
	// Sec-Fetch-Site vouches for it.
	b.header = map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}
	r = b.post("/ui/signin", url.Values{"api_key": {keyA}, "csrf": {tok}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	b2 := e.browser(t)
	tok2 := csrf(t, b2.get("/ui/signin").body)
	b2.header = map[string]string{"Origin": e.base, "Sec-Fetch-Site": "same-origin"}
	r = b2.post("/ui/signin", url.Values{"api_key": {keyA}, "csrf": {tok2}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
}

func TestActionsAreCSRFProtected(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	rec := e.claim(t, tenantA, "stripe", "evt_csrf")
	b := e.browser(t)
	tok := b.signIn(keyA)
	path := "/ui/claims/" + rec.ID + "/release"
	good := url.Values{"confirm": {"yes"}, "note": {"stuck"}}
	for name, f := range map[string]func(url.Values){
		"no token":    func(url.Values) {},
		"wrong token": func(v url.Values) { v.Set("csrf", tok[:len(tok)-1]+"x") },
	} {
		form := url.Values{"confirm": good["confirm"], "note": good["note"]}
		f(form)
		r := b.post(path, form)
		require.Equal(t, http.StatusForbidden, r.status, name)
	}
	b.header = map[string]string{"Origin": "http://evil.example"}
	form := url.Values{"confirm": {"yes"}, "note": {"stuck"}, "csrf": {tok}}
	require.Equal(t, http.StatusForbidden, b.post(path, form).status)
	b.header = map[string]string{"Sec-Fetch-Site": "same-site"}
	require.Equal(t, http.StatusForbidden, b.post(path, form).status)
	// Sign-out too.
	require.Equal(t, http.StatusForbidden, b.post("/ui/signout", url.Values{"csrf": {tok}}).status)
	got, err := e.ledger.Get(e.ctx, tenantA, rec.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateProcessing, got.State, "nothing was done")
	// Another session's token is no token of this one.
	other := e.browser(t)
	otherTok := other.signIn(keyA)
	b.header = map[string]string{}
	form.Set("csrf", otherTok)
	require.Equal(t, http.StatusForbidden, b.post(path, form).status)
	form.Set("csrf", tok)
	require.Equal(t, http.StatusSeeOther, b.post(path, form).status)
}

func TestRevokedKeyEndsItsSession(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	key, info, err := auth.Create(e.ctx, e.pool, tenantA, "console")
	require.NoError(t, err)
	b := e.browser(t)
	b.signIn(key)
	home := b.get("/ui/")
	require.Contains(t, home.body, info.Prefix)
	require.NotContains(t, home.body, key)
	_, err = auth.Revoke(e.ctx, e.pool, info.ID)
	require.NoError(t, err)
	// At once, although the key cache would still accept the key on /v1.
	r := b.get("/ui/")
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/ui/signin", r.location())
}

func TestOverviewCounts(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	e.claim(t, tenantA, "stripe", "p1")
	e.claim(t, tenantA, "stripe", "p2")
	u := e.claim(t, tenantA, "stripe", "u1")
	_, err := e.ledger.Fail(e.ctx, tenantA, u.ID, u.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	d := e.claim(t, tenantA, "github", "d1")
	_, err = e.ledger.Fail(e.ctx, tenantA, d.ID, d.Token, claim.Permanent, "bad")
	require.NoError(t, err)
	rf := e.claim(t, tenantA, "github", "r1")
	_, err = e.ledger.Fail(e.ctx, tenantA, rf.ID, rf.Token, claim.Retryable, "503")
	require.NoError(t, err)
	// A conflict: the same key with another payload hash.
	_, err = e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "github", EventID: "r1"},
		PayloadHash: strings.Repeat("cd", 32)})
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE claims SET claimed_at = now() - interval '2 hours' WHERE event_id = 'p1'`)
	require.NoError(t, err)
	e.claim(t, tenantB, "stripe", "b1")
	e.claim(t, tenantB, "shopify", "b2")
	// An ingested event, received and dead-lettered in dispatch.
	id := e.ingest(t, "evt_ov")
	_, err = e.pool.Exec(e.ctx, `UPDATE inbox_events SET dispatch_state = 'dead_lettered' WHERE claim_id = $1`, id)
	require.NoError(t, err)

	b := e.browser(t)
	b.signIn(keyA)
	page := b.get("/ui/")
	require.Equal(t, http.StatusOK, page.status)
	rows := overviewRows(t, page.body)
	require.Equal(t, []string{"github", "stripe", "tok"}, keysOf(rows))
	require.Equal(t, map[string]string{"count-received": "0", "count-processing": "0", "count-retryable_failed": "1",
		"count-dead_lettered": "1", "count-unknown": "0", "conflicts": "1 / 1", "oldest-received": "—",
		"oldest-processing": "—", "dispatch-dead-lettered": "0"}, rows["github"])
	require.Equal(t, "2", rows["stripe"]["count-processing"])
	require.Equal(t, "1", rows["stripe"]["count-unknown"])
	require.Equal(t, "2h0m", rows["stripe"]["oldest-processing"])
	require.Equal(t, "1", rows["tok"]["count-received"])
	require.Equal(t, "1", rows["tok"]["dispatch-dead-lettered"])
	require.NotContains(t, page.body, "shopify", "another tenant's source")

	bb := e.browser(t)
	bb.signIn(keyB)
	rows = overviewRows(t, bb.get("/ui/").body)
	require.Equal(t, []string{"shopify", "stripe"}, keysOf(rows))
	require.Equal(t, "1", rows["stripe"]["count-processing"])
}

// ingest stores one event of source tok (tenant A) and returns its id.
func (e *env) ingest(t *testing.T, id string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.base+"/ingest/tok",
		strings.NewReader(`{"id":"`+id+`","secret_marker":"RAW-PAYLOAD-`+id+`"}`))
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", tokKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var claimID string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id::text FROM claims WHERE source = 'tok' AND event_id = $1`, id).Scan(&claimID))
	return claimID
}

// overviewRows reads the overview table: source → data-testid → text.
func overviewRows(t *testing.T, page string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, chunk := range strings.Split(page, `data-testid="overview-row" data-source="`)[1:] {
		src := chunk[:strings.Index(chunk, `"`)]
		chunk = chunk[:strings.Index(chunk, "</tr>")]
		row := map[string]string{}
		for _, id := range []string{"count-received", "count-processing", "count-retryable_failed", "count-dead_lettered",
			"count-unknown", "conflicts", "oldest-received", "oldest-processing", "dispatch-dead-lettered"} {
			i := strings.Index(chunk, `data-testid="`+id+`"`)
			require.GreaterOrEqual(t, i, 0, id)
			cell := chunk[i:]
			cell = cell[strings.Index(cell, ">")+1 : strings.Index(cell, "</td>")]
			cell = strings.TrimSpace(stripTags(cell))
			row[id] = cell
		}
		out[src] = row
	}
	return out
}

func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestListFiltersAndPaging(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	var ids []string
	for i := 0; i < 7; i++ {
		r := e.claim(t, tenantA, "stripe", fmt.Sprintf("evt_%d", i))
		ids = append(ids, r.ID)
	}
	gh := e.claim(t, tenantA, "github", "gh_1")
	_, err := e.ledger.Complete(e.ctx, tenantA, gh.ID, gh.Token, "ref")
	require.NoError(t, err)
	pct := e.claim(t, tenantA, "stripe", "evt_%x")
	b1 := e.claim(t, tenantB, "stripe", "evt_0")
	// Times: evt_i changed 10-i minutes ago, first seen 10-i hours ago; the
	// others now.
	for i, id := range ids {
		_, err := e.pool.Exec(e.ctx, `UPDATE claims SET updated_at = now() - make_interval(mins => $2),
			created_at = now() - make_interval(hours => $2) WHERE id = $1`, id, 10-i)
		require.NoError(t, err)
	}
	b := e.browser(t)
	b.signIn(keyA)
	rowIDs := func(page string) []string {
		var out []string
		for _, chunk := range strings.Split(page, `data-testid="claim-row" data-claim-id="`)[1:] {
			out = append(out, chunk[:strings.Index(chunk, `"`)])
		}
		return out
	}
	list := func(q url.Values) []string {
		r := b.get("/ui/claims?" + q.Encode())
		require.Equal(t, http.StatusOK, r.status, r.body)
		return rowIDs(r.body)
	}

	// Paging, newest first, 3 a page: every record once.
	var seen []string
	next := "/ui/claims?source=stripe&limit=3"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 5)
		r := b.get(next)
		require.Equal(t, http.StatusOK, r.status)
		seen = append(seen, rowIDs(r.body)...)
		// First page: none on the first, then one keeping the filters.
		if pages == 0 {
			require.NotContains(t, r.body, `id="first-page"`)
		} else {
			require.Contains(t, r.body, `id="first-page" data-testid="first-page" href="/ui/claims?limit=3&amp;source=stripe"`)
		}
		next = ""
		if i := strings.Index(r.body, `id="next-page" data-testid="next-page" href="`); i >= 0 {
			rest := r.body[i+len(`id="next-page" data-testid="next-page" href="`):]
			next = strings.ReplaceAll(rest[:strings.Index(rest, `"`)], "&amp;", "&")
		}
	}
	want := []string{pct.ID}
	for i := len(ids) - 1; i >= 0; i-- {
		want = append(want, ids[i])
	}
	require.Equal(t, want, seen)
	require.NotContains(t, seen, b1.ID)

	require.Equal(t, []string{gh.ID}, list(url.Values{"state": {"completed"}}))
	require.Equal(t, []string{gh.ID}, list(url.Values{"source": {"github"}}))
	require.Equal(t, []string{pct.ID}, list(url.Values{"event_id_prefix": {"evt_%"}}))
	require.Equal(t, []string{ids[6], ids[5]}, list(url.Values{"event_id_prefix": {"evt_"}, "to": {
		time.Now().UTC().Add(-210 * time.Second).Format(time.RFC3339)}, "from": {time.Now().UTC().Add(-5*time.Minute - 30*time.Second).Format("2006-01-02T15:04:05")}}))
	require.Equal(t, []string{ids[2], ids[1]}, list(url.Values{"time_field": {"created"},
		"from": {time.Now().UTC().Add(-9*time.Hour - 30*time.Minute).Format(time.RFC3339)},
		"to":   {time.Now().UTC().Add(-7*time.Hour - 30*time.Minute).Format(time.RFC3339)}}))
	empty := b.get("/ui/claims?state=unknown")
	require.Contains(t, empty.body, `id="claims-empty"`)

	for q, field := range map[string]string{"state=nope": "state", "source=-x": "source", "from=yesterday": "from",
		"time_field=x": "time_field", "limit=0": "limit", "cursor=zz": "cursor"} {
		r := b.get("/ui/claims?" + q)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, q)
		require.Equal(t, []string{field}, texts(r.body, "error-field"), q)
	}
}

func TestRecordPageShowsTheDeliveryLog(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	won := e.claim(t, tenantA, "stripe", "evt_page")
	_, err := e.ledger.Complete(e.ctx, tenantA, won.ID, won.Token, "inv_77")
	require.NoError(t, err)
	dup, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "stripe", EventID: "evt_page"},
		PayloadHash: strings.Repeat("ab", 32)})
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, dup.Outcome)
	_, err = e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "stripe", EventID: "evt_page"},
		PayloadHash: strings.Repeat("ef", 32)})
	require.NoError(t, err)

	b := e.browser(t)
	b.signIn(keyA)
	r := b.get("/ui/claims/" + won.ID)
	require.Equal(t, http.StatusOK, r.status, e.logs.String())
	require.Equal(t, []string{"won", "completed", "duplicate", "conflict"}, texts(r.body, "delivery-outcome"))
	require.Equal(t, []string{"inv_77"}, texts(r.body, "field-result_ref"))
	require.Equal(t, []string{"completed"}, texts(r.body, "record-state"))
	require.Equal(t, []string{"1 of 5"}, texts(r.body, "field-attempt"))
	require.Contains(t, r.body, strings.Repeat("ab", 32))
	require.Contains(t, r.body, `id="actions-none"`)
	require.NotContains(t, r.body, won.Token)

	// An ingested event: the dispatch section, never the payload.
	id := e.ingest(t, "evt_ing")
	r = b.get("/ui/claims/" + id)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, []string{"pending"}, texts(r.body, "dispatch-state"))
	require.Equal(t, []string{"received"}, texts(r.body, "delivery-outcome"))
	require.NotContains(t, r.body, "RAW-PAYLOAD")
}

func TestReleaseResolveReplay(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	rec := e.claim(t, tenantA, "stripe", "evt_act")
	b := e.browser(t)
	tok := b.signIn(keyA)
	actor := staticPrefix(keyA)

	page := b.get("/ui/claims/" + rec.ID)
	require.Contains(t, page.body, `id="action-release"`)
	require.NotContains(t, page.body, `id="action-resolve"`)
	confirm := b.get("/ui/claims/" + rec.ID + "/release")
	require.Equal(t, http.StatusOK, confirm.status)
	require.Contains(t, confirm.body, `id="release-form"`)
	require.Contains(t, confirm.body, `name="confirm"`)
	require.Contains(t, confirm.body, "not ended", "the lease is still valid")
	// Resolve does not apply to a processing record.
	r := b.get("/ui/claims/" + rec.ID + "/resolve")
	require.Equal(t, http.StatusConflict, r.status)

	path := "/ui/claims/" + rec.ID + "/release"
	for _, tc := range []struct {
		form  url.Values
		field string
	}{
		{url.Values{"note": {"stuck"}}, "confirm"},
		{url.Values{"confirm": {"on"}, "note": {"stuck"}}, "confirm"},
		{url.Values{"confirm": {"yes"}}, "note"},
		{url.Values{"confirm": {"yes"}, "note": {"   "}}, "note"},
		{url.Values{"confirm": {"yes"}, "note": {strings.Repeat("n", claim.MaxNoteLen+1)}}, "note"},
		{url.Values{"confirm": {"yes"}, "note": {"bad \x00 byte"}}, "note"},
	} {
		tc.form.Set("csrf", tok)
		r := b.post(path, tc.form)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, tc.form)
		require.Equal(t, []string{tc.field}, texts(r.body, "error-field"), tc.form)
	}
	got, err := e.ledger.Get(e.ctx, tenantA, rec.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateProcessing, got.State)

	r = b.post(path, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"worker pod evicted"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	require.Equal(t, "/ui/claims/"+rec.ID+"?done=release", r.location())
	page = b.get(r.location())
	require.Equal(t, []string{"unknown"}, texts(page.body, "record-state"))
	require.Len(t, texts(page.body, "flash"), 1)
	require.Contains(t, page.body, `id="action-resolve"`)
	got, err = e.ledger.Get(e.ctx, tenantA, rec.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateUnknown, got.State)
	last := got.Deliveries[len(got.Deliveries)-1]
	require.Equal(t, "released", last.Outcome)
	require.Equal(t, actor, last.Actor)
	require.Equal(t, "worker pod evicted", last.Detail)
	require.Contains(t, page.body, "worker pod evicted")
	require.Equal(t, []string{"by"}, texts(page.body, "delivery-actor"))
	require.Contains(t, page.body, "<code>"+actor+"</code>")
	// The holder is fenced: its Fail is lease_lost.
	_, err = e.ledger.Fail(e.ctx, tenantA, rec.ID, rec.Token, claim.Retryable, "late")
	require.Error(t, err)
	// Released twice: a conflict, nothing written.
	r = b.post(path, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"again"}})
	require.Equal(t, http.StatusConflict, r.status)

	// Resolve the unknown record as failed, then a dead letter as completed.
	confirm = b.get("/ui/claims/" + rec.ID + "/resolve")
	require.Contains(t, confirm.body, `data-testid="outcome-failed"`)
	rpath := "/ui/claims/" + rec.ID + "/resolve"
	r = b.post(rpath, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"n"}})
	require.Equal(t, []string{"outcome"}, texts(r.body, "error-field"))
	r = b.post(rpath, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"n"}, "outcome": {"maybe"}})
	require.Equal(t, []string{"outcome"}, texts(r.body, "error-field"))
	r = b.post(rpath, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"n"}, "outcome": {"retry"}, "result_ref": {"x"}})
	require.Equal(t, []string{"result_ref"}, texts(r.body, "error-field"))
	r = b.post(rpath, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"mail never sent"}, "outcome": {"failed"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	got, err = e.ledger.Get(e.ctx, tenantA, rec.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateDeadLettered, got.State)
	confirm = b.get("/ui/claims/" + rec.ID + "/resolve")
	require.NotContains(t, confirm.body, `data-testid="outcome-failed"`)
	r = b.post(rpath, url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"found it"}, "outcome": {"completed"},
		"result_ref": {"inv_1"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	got, err = e.ledger.Get(e.ctx, tenantA, rec.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, got.State)
	require.Equal(t, "inv_1", got.ResultRef)
	var ops []string
	for _, d := range got.Deliveries {
		if d.Actor != "" {
			require.Equal(t, actor, d.Actor)
			ops = append(ops, d.Outcome+": "+d.Detail)
		}
	}
	require.Equal(t, []string{"released: worker pod evicted", "resolved_failed: mail never sent",
		"resolved_completed: found it"}, ops)

	// Replay a dead-lettered dispatch of an ingested event.
	id := e.ingest(t, "evt_replay")
	r = b.get("/ui/claims/" + id + "/replay")
	require.Equal(t, http.StatusConflict, r.status, "pending: nothing to replay")
	_, err = e.pool.Exec(e.ctx, `UPDATE inbox_events SET dispatch_state = 'dead_lettered', dispatch_attempts = 10
		WHERE claim_id = $1`, id)
	require.NoError(t, err)
	page = b.get("/ui/claims/" + id)
	require.Contains(t, page.body, `id="action-replay"`)
	require.Contains(t, b.get("/ui/claims/"+id+"/replay").body, `id="replay-form"`)
	r = b.post("/ui/claims/"+id+"/replay", url.Values{"csrf": {tok}, "note": {"target fixed"}})
	require.Equal(t, []string{"confirm"}, texts(r.body, "error-field"))
	r = b.post("/ui/claims/"+id+"/replay", url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"target fixed"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	page = b.get(r.location())
	require.Equal(t, []string{"pending"}, texts(page.body, "dispatch-state"))
	got, err = e.ledger.Get(e.ctx, tenantA, id)
	require.NoError(t, err)
	last = got.Deliveries[len(got.Deliveries)-1]
	require.Equal(t, "dispatch_replayed", last.Outcome)
	require.Equal(t, actor, last.Actor)
	require.Equal(t, "target fixed", last.Detail)
	// A record that never came through ingest has no dispatch to replay.
	r = b.post("/ui/claims/"+rec.ID+"/replay", url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"x"}})
	require.Equal(t, http.StatusConflict, r.status)
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	recA := e.claim(t, tenantA, "stripe", "evt_secret_of_a")
	idA := e.ingest(t, "evt_ingested_of_a")
	_, err := e.pool.Exec(e.ctx, `UPDATE inbox_events SET dispatch_state = 'dead_lettered' WHERE claim_id = $1`, idA)
	require.NoError(t, err)
	b := e.browser(t)
	tok := b.signIn(keyB)

	notFound := func(r reply) {
		t.Helper()
		require.Equal(t, http.StatusNotFound, r.status)
		require.Contains(t, r.body, `data-code="not_found"`)
		require.NotContains(t, r.body, "evt_secret_of_a")
		require.NotContains(t, r.body, "evt_ingested_of_a")
	}
	for _, id := range []string{recA.ID, idA} {
		notFound(b.get("/ui/claims/" + id))
		for _, a := range []string{"release", "resolve", "replay"} {
			notFound(b.get("/ui/claims/" + id + "/" + a))
		}
	}
	form := url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"x"}, "outcome": {"completed"}}
	notFound(b.post("/ui/claims/"+recA.ID+"/release", form))
	notFound(b.post("/ui/claims/"+recA.ID+"/resolve", form))
	notFound(b.post("/ui/claims/"+idA+"/replay", form))
	list := b.get("/ui/claims")
	require.Contains(t, list.body, `id="claims-empty"`)
	require.NotContains(t, b.get("/ui/").body, "stripe")

	got, err := e.ledger.Get(e.ctx, tenantA, recA.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateProcessing, got.State)
	var state string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT dispatch_state FROM inbox_events WHERE claim_id = $1`, idA).Scan(&state))
	require.Equal(t, "dead_lettered", state)
}

// No page shows a claim token, an API key, a session token or a stored
// payload; no error quotes what the caller sent.
func TestNoSecretsAndNoEcho(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	dbKey, _, err := auth.Create(e.ctx, e.pool, tenantA, "ops")
	require.NoError(t, err)
	rec := e.claim(t, tenantA, "stripe", "evt_tok")
	id := e.ingest(t, "evt_raw")
	b := e.browser(t)
	tok := b.signIn(dbKey)
	session := b.cookies["claimd_session"]
	b.get("/ui/")
	b.get("/ui/claims")
	b.get("/ui/claims/" + rec.ID)
	b.get("/ui/claims/" + rec.ID + "/release")
	b.get("/ui/claims/" + id)
	b.post("/ui/claims/"+rec.ID+"/release", url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {"n"}})
	b.get("/ui/claims/" + rec.ID)
	b.get("/ui/claims/" + rec.ID + "/resolve")

	const marker = `<script>MARK-9f3</script>`
	for _, path := range []string{
		"/ui/claims/" + url.PathEscape(marker),
		"/ui/claims/" + url.PathEscape(marker) + "/release",
		"/ui/claims?source=" + url.QueryEscape(marker),
		"/ui/claims?state=" + url.QueryEscape(marker),
		"/ui/claims?from=" + url.QueryEscape(marker),
		"/ui/claims?cursor=" + url.QueryEscape(marker),
		"/ui/" + url.PathEscape(marker),
	} {
		r := b.get(path)
		require.GreaterOrEqual(t, r.status, 400, path)
		require.NotContains(t, r.body, "MARK-9f3", path)
	}
	r := b.post("/ui/claims/"+url.PathEscape(marker)+"/release", url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {marker}})
	require.Equal(t, http.StatusNotFound, r.status)
	r = b.post("/ui/claims/"+rec.ID+"/resolve", url.Values{"csrf": {tok}, "confirm": {"yes"}, "note": {marker},
		"outcome": {marker}})
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	for _, wrong := range []string{marker, "ick_" + strings.Repeat("Q", 43)} {
		r = e.browser(t).signInReply(wrong)
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.NotContains(t, r.body, "MARK-9f3")
		require.NotContains(t, r.body, strings.Repeat("Q", 43))
	}

	require.NotEmpty(t, b.pages)
	for i, page := range b.pages {
		for what, secret := range map[string]string{"claim token": rec.Token, "API key": dbKey, "session token": session,
			"static key": keyA, "raw payload": "RAW-PAYLOAD", "marker": "MARK-9f3"} {
			require.NotContains(t, page, secret, "page %d shows the %s", i, what)
		}
	}
	require.NotContains(t, e.logs.String(), dbKey)
	require.NotContains(t, e.logs.String(), session)
}
