package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Status of one received event, as answered to the provider.
type Status string

// Receipt statuses.
const (
	Accepted  Status = "accepted"  // new: stored and queued for dispatch
	Duplicate Status = "duplicate" // known key, same payload: nothing new
	Conflict  Status = "conflict"  // known key, different payload: kept for review, not dispatched
)

// Receipt is the answer for one event of a delivery. KeyExpiresAt and
// KeyExpiry say when the record's key may be forgotten under the current
// policy (claim.Ledger.KeyExpiry of the record as stored or found: a
// duplicate or conflict names the existing record's): a resend after
// that date is a new event.
type Receipt struct {
	EventID      string    `json:"event_id"`
	ClaimID      string    `json:"claim_id"`
	Status       Status    `json:"status"`
	KeyExpiresAt time.Time `json:"key_expires_at"`
	KeyExpiry    string    `json:"key_expiry"`

	// Cause is why a duplicate came, as the delivery log has it; never
	// answered to the provider.
	Cause claim.Cause `json:"-"`
}

// Observer receives ingest and dispatch events for metrics.
type Observer interface {
	Received(source string, s Status)
	Rejected(source, reason string)
	Dispatched(source, result string, sinceReceipt time.Duration)
}

type nopObserver struct{}

func (nopObserver) Received(string, Status)                  {}
func (nopObserver) Rejected(string, string)                  {}
func (nopObserver) Dispatched(string, string, time.Duration) {}

// queries runs the package's statements (sidecar/db/queries/ingest.sql).
var queries = dbsqlc.New()

// Inbox stores verified deliveries and dispatches them.
type Inbox struct {
	pool   *pgxpool.Pool
	ledger *claim.Ledger
	river  *river.Client[pgx.Tx]
	cfg    atomic.Pointer[Config]
	log    zerolog.Logger
	obs    Observer
	client *http.Client
	jitter func() float64
	// dispatching: this process runs dispatch workers.
	dispatching bool
	// receipts groups concurrent deliveries (receipt_groups.go); nil
	// when grouping is off.
	receipts *group.Grouper[*delivery, []Receipt]
	// loads, reserves and marks group the dispatcher's reads, attempt
	// reservations and 2xx marks (dispatch_statement_groups.go); nil
	// when grouping is off.
	loads    *group.Grouper[string, loaded]
	reserves *group.Grouper[reserveReq, reserved]
	marks    *group.Grouper[mark, bool]
}

// Source returns the configured ingest source name (an ingest door, with
// a forward target), or nil: also for a trigger source, which is no
// ingest door.
func (in *Inbox) Source(name string) *Source {
	c := in.cfg.Load()
	if c == nil {
		return nil
	}
	return c.Sources[name]
}

// TriggerSource returns the source name that POST /v1/trigger/{source}
// decides deliveries for: an ingest door or a trigger source, as loaded
// now; nil when the sources file configures no verified source of that
// name. The caller checks the source's Tenant.
func (in *Inbox) TriggerSource(name string) *Source {
	c := in.cfg.Load()
	if c == nil {
		return nil
	}
	if s := c.Sources[name]; s != nil {
		return s
	}
	return c.Triggers[name]
}

// MaxBodyBytes is the largest body limit of any source, ingest door or
// trigger source, in bytes (0 without sources).
func (in *Inbox) MaxBodyBytes() int {
	n := 0
	if c := in.cfg.Load(); c != nil {
		for _, m := range []map[string]*Source{c.Sources, c.Triggers} {
			for _, s := range m {
				n = max(n, s.MaxBodyBytes)
			}
		}
	}
	return n
}

// Observe reports a rejected delivery (bad signature, too large…) to metrics.
func (in *Inbox) Observe(source, reason string) { in.obs.Rejected(source, reason) }

// Receive keys and hashes the events of one verified delivery as Verify
// does (Source.Prepare) and stores them (Store). body is the whole raw
// body; an event's own Payload, when set, is stored instead. headers are
// the forwardable request headers. Errors: as Store, and an authenticated
// *verify.Error for a body that cannot be hashed strictly (nothing is
// written then).
func (in *Inbox) Receive(ctx context.Context, src *Source, events []verify.Event, body []byte, contentType string, headers map[string]string) ([]Receipt, error) {
	prepared, err := src.Prepare(events, body, contentType)
	if err != nil {
		return nil, err
	}
	return in.Store(ctx, src, prepared, nil, headers)
}

// Store stores the prepared events of one verified delivery (Source.Verify
// or Source.Prepare made them) in ONE transaction: per event an inbox
// record (claim ledger, state received) and, when the key is new, its
// dispatch job (River, the transactional outbox). Redeliveries are logged;
// conflicting payloads are kept in inbox_conflicts and never dispatched.
// The caller answers 2xx only after Store returns nil. headers are the
// forwardable request headers.
//
// Concurrent deliveries share transactions (group commit, see receipt_groups.go):
// each still gets exactly the receipts it would get alone, only after the
// commit. Errors: Invalid (no event, or a request the ledger refuses), and
// Unavailable for any database error (storeError), also when ctx ends
// first (the delivery may then still be stored: its redelivery is a
// duplicate).
//
// nonce, when non-nil, is the delivery's signed one-time value
// (Verified.Nonce): it is recorded in the same transaction, bound to this
// delivery's events (claim.RecordNoncesTx). Seen before with other events
// (a captured signature carrying another body), the delivery is refused:
// a *verify.Error with CodeBadSignature naming the nonce's field,
// Authenticated false, and nothing is stored. Seen with the same events
// (a provider retry of the very same request), it is stored as any
// redelivery: its receipts say duplicate.
func (in *Inbox) Store(ctx context.Context, src *Source, events []Event, nonce *verify.Nonce, headers map[string]string) ([]Receipt, error) {
	if len(events) == 0 {
		return nil, apperr.New(apperr.Invalid, "the delivery carries no event")
	}
	hdrJSON, err := json.Marshal(headers)
	if err != nil {
		return nil, err
	}
	// Every request validated, so that none fails a group it joins.
	d := &delivery{src: src, hdrJSON: hdrJSON, reqs: make([]claim.Request, len(events)),
		payloads: make([][]byte, len(events)), cts: make([]string, len(events))}
	for i, ev := range events {
		if err := in.ledger.Validate(ev.Request); err != nil {
			return nil, err
		}
		d.reqs[i], d.payloads[i], d.cts[i] = ev.Request, ev.Payload, ev.ContentType
	}
	if nonce != nil {
		n := claim.NewNonce(src.Tenant, src.Scope, nonce.Value, nonce.TTL, d.reqs)
		d.nonce = &n
	}
	var receipts []Receipt
	if in.receipts == nil {
		receipts, err = in.storeAlone(ctx, d)
	} else {
		receipts, err = in.receipts.DoWeighted(ctx, d, len(d.reqs))
	}
	if errors.Is(err, claim.ErrNonceReplayed) {
		return nil, replayError(nonce)
	}
	if err != nil {
		return nil, storeError(err)
	}
	dup, _ := in.obs.(claim.DuplicateObserver)
	for _, r := range receipts {
		in.obs.Received(src.Name, r.Status)
		if r.Cause != "" && dup != nil {
			dup.Duplicated(src.Name, r.Cause)
		}
	}
	return receipts, nil
}

// replayError refuses a delivery whose signed one-time value n came
// before with other events: the signature was made for another delivery,
// so this one is not authenticated (CodeBadSignature, the nonce's field).
func replayError(n *verify.Nonce) error {
	return &verify.Error{Code: verify.CodeBadSignature, In: n.In, Field: n.Field,
		Reason: "this signed one-time value was already used by another delivery (a replayed signature)"}
}

// CheckNonce records the signed one-time value of a verified delivery
// (v.Nonce; nil: nothing to do) bound to its events, in a transaction of
// its own (claim.Ledger.RecordNonce): nil when it is new or came before
// with the same events (a provider retry), the refusal of Store's nonce
// (a *verify.Error, unauthenticated) when it came with other events, an
// Unavailable or internal error (db.Error) when the database fails.
// POST /v1/trigger/{source} calls it before it claims the events.
func (in *Inbox) CheckNonce(ctx context.Context, src *Source, v Verified) error {
	if v.Nonce == nil {
		return nil
	}
	reqs := make([]claim.Request, len(v.Events))
	for i, ev := range v.Events {
		reqs[i] = ev.Request
	}
	err := in.ledger.RecordNonce(ctx, claim.NewNonce(src.Tenant, src.Scope, v.Nonce.Value, v.Nonce.TTL, reqs))
	if errors.Is(err, claim.ErrNonceReplayed) {
		return replayError(v.Nonce)
	}
	return err
}

// storeError is the answer to an error of Receive's transaction: an
// application error of the request (Invalid) as it is; any database error
// Unavailable (503 with Retry-After, never 2xx, never 500), so that the
// provider delivers the event again. When the connection was lost under
// the commit (db.OutcomeUnknown) the event may be stored: its
// redelivery is then answered as a duplicate, and dispatched once. The
// database's message stays in Err, for the log.
func storeError(err error) error {
	if e := apperr.As(err); e != nil && e.Code != apperr.Unavailable && e.Code != apperr.Internal {
		return err
	}
	msg := "the event could not be stored; retry"
	switch fault, reason := db.Classify(err); fault {
	case db.NothingKept:
		msg = "the event could not be stored: " + reason + "; retry"
	case db.OutcomeUnknown:
		msg = "the event may or may not be stored: " + reason + "; deliver it again " +
			"(a stored event is answered as a duplicate, and dispatched once)"
	}
	return &apperr.Error{Code: apperr.Unavailable, Message: msg, Err: err}
}

// itemContentType is the content type of one item of a batch body: a
// CloudEvents batch (application/cloudevents-batch+json) holds structured
// events (application/cloudevents+json, same parameters); the items of
// other batches (Microsoft Graph's value array) keep the body's type.
func itemContentType(contentType string) string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != verify.CloudEventsBatchMediaType {
		return contentType
	}
	return mime.FormatMediaType(verify.CloudEventsJSONMediaType, params)
}

// eventID is the event id an ingested event is stored under: the
// provider's id made header-safe (headerSafe: percent-encoding of every
// byte outside printable ASCII, of '%' and of a leading or trailing space),
// so that the dispatcher can hand it to n8n in X-Idempotency-Event-Id byte
// for byte and the workflow claims exactly this record (HTTP stacks such
// as Node.js read header bytes as Latin-1, and cannot send control
// characters at all). Where the ledger cannot keep the id — longer than it
// accepts once encoded, not UTF-8, or holding NUL bytes — "sha256:" and the
// hex SHA-256 of its bytes stands in for it (an authentic event is stored,
// never refused for its id). So that a stand-in can never equal a literal
// id, a provider id that itself starts with "sha256:" is hashed too (unless
// the verifier derived it as a digest): the mapping is one-to-one.
func eventID(ev verify.Event) string {
	if strings.HasPrefix(ev.ID, hashedIDPrefix) && !ev.Digest {
		return hashID(ev.ID)
	}
	if !utf8.ValidString(ev.ID) || strings.ContainsRune(ev.ID, 0) {
		return hashID(ev.ID)
	}
	return fitID(headerSafe(ev.ID), claim.MaxEventIDLen, ev.ID)
}

// headerSafe percent-encodes (RFC 3986 §2.1, upper-case hex) every byte of
// s that is not printable ASCII (below 0x21 or above 0x7E, space aside),
// every '%', and a leading or trailing space (HTTP drops those around a
// field value); the rest stays as it is. It is one-to-one: '%' is always
// encoded, so an encoded sequence never appears literally. Ids made of
// printable ASCII without '%' — every provider id we know — are unchanged.
func headerSafe(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if escapeByte(s, i) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escapeByte(s, i) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// forHeader is s as an HTTP header value: s itself when every byte is
// printable ASCII (an id eventID made: already encoded, so never encoded
// twice), else headerSafe(s) (a record stored before ids were made
// header-safe, or an informational text such as an event type).
func forHeader(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || (c == ' ' && (i == 0 || i == len(s)-1)) {
			return headerSafe(s)
		}
	}
	return s
}

func escapeByte(s string, i int) bool {
	c := s[i]
	switch {
	case c == '%', c < 0x20, c > 0x7e:
		return true
	case c == ' ':
		return i == 0 || i == len(s)-1
	}
	return false
}

// hashedIDPrefix starts every id that stands in for another.
const hashedIDPrefix = "sha256:"

// fitID keeps a provider identifier that the ledger can store, or stands
// the SHA-256 of raw (the identifier as the provider sent it, id itself
// when omitted) in for it: too long, not UTF-8, or holding NUL bytes.
func fitID(id string, max int, raw ...string) string {
	if len(id) <= max && utf8.ValidString(id) && !strings.ContainsRune(id, 0) {
		return id
	}
	if len(raw) > 0 {
		return hashID(raw[0])
	}
	return hashID(id)
}

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hashedIDPrefix + hex.EncodeToString(sum[:])
}

// truncate cuts an informational text (an event type) to n bytes of valid
// UTF-8 without NUL bytes.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// rearm puts a dead-lettered dispatch back to pending with a fresh attempt
// budget and queues a new dispatch job, in tx. The conditional UPDATE
// arbitrates concurrent callers: exactly one re-arms. It reports whether
// this call did. A provider's redelivery of an event whose dispatch was
// dead-lettered re-arms it (the provider says the event still matters);
// so does an operator's replay.
func (in *Inbox) rearm(ctx context.Context, tx pgx.Tx, tenant, id string, src *Source, why string, actor *string) (bool, error) {
	rearmed, err := queries.RearmDeadLettered(ctx, tx, dbsqlc.RearmDeadLetteredParams{ClaimID: id, Detail: why, Actor: actor, Tenant: &tenant})
	if err != nil || !rearmed {
		return false, err
	}
	if _, err := in.river.InsertTx(ctx, tx, DispatchArgs{ClaimID: id, Source: src.Name},
		&river.InsertOpts{Queue: queueName(src.Name), MaxAttempts: riverMaxAttempts}); err != nil {
		return false, fmt.Errorf("enqueue dispatch: %w", err)
	}
	return true, nil
}

// receiptHash is the payload hash of one event as this source sees it
// (the receipt view, compared with the provider's redeliveries): for a JSON
// payload the SHA-256 of its exact canonical form (strictjson) without the
// source's volatile fields, for other content (form bodies, binary data) the
// SHA-256 of the raw bytes. A leading UTF-8 BOM is ignored (RFC 8259 §8.1).
// A payload that is JSON but not strict JSON (duplicate or case-variant
// names, invalid UTF-8, unpaired surrogates) is an authenticated
// *verify.Error: ambiguous input is refused, never hashed some other way.
func (s *Source) receiptHash(contentType string, payload []byte) (string, error) {
	content, err := s.hashedContent(contentType, payload)
	if err != nil {
		return "", err
	}
	content = strictjson.TrimBOM(content)
	if !looksJSON(contentType, content) {
		sum := sha256.Sum256(content)
		return hex.EncodeToString(sum[:]), nil
	}
	h, err := claim.PayloadHash(content, s.volatile...) // the claims API's hash: one view of a payload
	if notJSON(err) {
		// Not JSON at all (a signed test string, a truncated body): the
		// raw bytes are its only exact identity.
		sum := sha256.Sum256(content)
		return hex.EncodeToString(sum[:]), nil
	}
	if err != nil {
		return "", bodyError(err)
	}
	return h, nil
}

// notJSON reports whether a strict-decoding error says the content is not
// JSON at all (its grammar fails), as opposed to JSON that is ambiguous
// (duplicate names, invalid UTF-8, unpaired surrogates) or beyond what can
// be canonicalised exactly (too deep, numbers out of range), which is
// refused.
func notJSON(err error) bool {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Reason {
	case strictjson.ReasonSyntax, strictjson.ReasonTruncated, strictjson.ReasonTrailing, strictjson.ReasonEmpty:
		return true
	}
	return false
}

// looksJSON reports whether content is to be hashed as JSON: a JSON media
// type (application/json, any +json) or a body that starts, after
// whitespace, with '{' or '['.
func looksJSON(contentType string, content []byte) bool {
	if isJSONType(contentType) {
		return true
	}
	t := strings.TrimLeft(string(content[:min(len(content), 64)]), " \t\r\n")
	return strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")
}

// hashedContent is the part of an event's payload that its payload hash
// covers. For CloudEvents it is the event's data, so the same event sent in
// binary mode (the body is the data) and in structured mode (the body is
// the whole event, data inside) is a duplicate, not a conflict: (source,
// id) identify the event and data is its content (CloudEvents spec §3.1).
// In structured mode data is a JSON value, or, for a non-JSON
// datacontenttype, a string holding the data itself (JSON event format
// §3.1), or data_base64. It tests the provider type itself, the one place
// outside sidecar/verify that does: the rule is the CloudEvents event
// format's, applied to the stored payload when it is hashed (a verifier
// only proves and names events), and no other provider has two encodings
// of one event.
func (s *Source) hashedContent(contentType string, payload []byte) ([]byte, error) {
	structured := strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "application/cloudevents")
	if s.Provider != verify.TypeCloudEvents || !structured {
		return payload, nil // binary mode: the body is the data
	}
	var e struct {
		Data            jsontext.Value `json:"data"`
		DataBase64      *string        `json:"data_base64"`
		DataContentType string         `json:"datacontenttype"`
	}
	if err := strictjson.Unmarshal(strictjson.TrimBOM(payload), &e); err != nil {
		return nil, bodyError(err)
	}
	switch {
	case len(e.Data) > 0:
		mt, _, _ := mime.ParseMediaType(e.DataContentType)
		jsonData := e.DataContentType == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
		if e.Data.Kind() == '"' && !jsonData {
			var text string
			if err := strictjson.Unmarshal(e.Data, &text); err != nil {
				return nil, bodyError(err)
			}
			return []byte(text), nil
		}
		return e.Data, nil
	case e.DataBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*e.DataBase64)
		if err != nil {
			return nil, &verify.Error{Code: verify.CodeMalformedBody, In: verify.InBody, Field: "/data_base64",
				Reason: "is not valid base64", Authenticated: true}
		}
		return b, nil
	}
	return payload, nil
}

// StoredHeaders returns the headers of a delivery to s that are stored
// with its events and forwarded to n8n: ForwardableHeaders with s's
// CredentialHeaders, then, in every value, the query parameters named by
// s's CredentialQueryParams removed (RedactQueryParams): a reverse proxy's
// X-Original-URL or X-Forwarded-Uri, or a Referer, may repeat the webhook
// URL with its ?token=….
func (s *Source) StoredHeaders(visit func(func(name, value string))) map[string]string {
	out := ForwardableHeaders(visit, s.CredentialHeaders...)
	if len(s.CredentialQueryParams) == 0 {
		return out
	}
	for k, v := range out {
		out[k] = RedactQueryParams(v, s.CredentialQueryParams)
	}
	return out
}

// RedactQueryParams returns value with every query parameter named in
// params (exact names, compared after percent-decoding, as a server reads
// them) left out of its query: the part after the first '?' up to a '#',
// or, for a value without '?' that holds '=', the whole value read as a
// query string (a header that carries a bare query). Parameters are split
// on '&' (and ';'); the others are kept as they were, in order, joined
// with '&'. A value without such a parameter is returned unchanged.
func RedactQueryParams(value string, params []string) string {
	if len(params) == 0 {
		return value
	}
	prefix, query, fragment := "", value, ""
	if i := strings.IndexByte(value, '?'); i >= 0 {
		prefix, query = value[:i+1], value[i+1:]
	} else if !strings.Contains(value, "=") {
		return value
	}
	if i := strings.IndexByte(query, '#'); i >= 0 {
		query, fragment = query[:i], query[i:]
	}
	kept := make([]string, 0, 4)
	removed := false
	for _, part := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(part, "=")
		if dec, err := url.QueryUnescape(name); err == nil {
			name = dec
		}
		if slices.Contains(params, strings.TrimSpace(name)) {
			removed = true
			continue
		}
		kept = append(kept, part)
	}
	if !removed {
		return value
	}
	return prefix + strings.Join(kept, "&") + fragment
}

// ForwardableHeaders picks the request headers worth passing on to n8n:
// every header except credentials, signatures and hop-by-hop headers.
// credential names further headers to drop (case-insensitive), normally the
// source's CredentialHeaders: a generic scheme's signature or token header
// can be named anything.
func ForwardableHeaders(visit func(func(name, value string)), credential ...string) map[string]string {
	out := map[string]string{}
	visit(func(name, value string) {
		if !sendableHeaderValue(value) {
			return // control characters: no HTTP client could forward it
		}
		n := strings.ToLower(name)
		for _, c := range credential {
			if strings.EqualFold(n, c) {
				return
			}
		}
		for _, bad := range []string{"signature", "hmac", "authorization", "cookie", "token", "secret", "x-hub-", "x-idempotency-origin"} {
			if strings.Contains(n, bad) {
				return
			}
		}
		switch n {
		case "host", "content-length", "connection", "transfer-encoding", "keep-alive", "upgrade",
			"te", "trailer", "accept-encoding", "content-encoding", "expect":
			return
		}
		if _, dup := out[n]; !dup {
			out[n] = value
		}
	})
	return out
}

// InboxEvent is the dispatch status of an inbox record.
type InboxEvent struct {
	ClaimID            string     `json:"claim_id"`
	Source             string     `json:"source"`
	EventID            string     `json:"event_id"`
	ClaimState         string     `json:"claim_state"`
	DispatchState      string     `json:"dispatch_state"`
	DispatchAttempts   int        `json:"dispatch_attempts"`
	LastDispatchStatus *int       `json:"last_dispatch_status,omitempty"`
	LastDispatchError  string     `json:"last_dispatch_error,omitempty"`
	ReceivedAt         time.Time  `json:"received_at"`
	DispatchedAt       *time.Time `json:"dispatched_at,omitempty"`
	// Origin is "backfill" for an event claimd took from the provider's
	// own list of events (its delivery never arrived), "" (absent) for a
	// delivered one.
	Origin string `json:"origin,omitempty"`
	// KeyExpiresAt and KeyExpiry: when the record's key may be forgotten
	// under the current policy (claim.Ledger.KeyExpiry).
	KeyExpiresAt time.Time `json:"key_expires_at"`
	KeyExpiry    string    `json:"key_expiry"`
}

// Get returns the inbox event's dispatch status. Errors: NotFound (also for
// another tenant's event); a database error as db.Error maps it.
func (in *Inbox) Get(ctx context.Context, tenant, id string) (InboxEvent, error) {
	if _, err := uuid.Parse(id); err != nil {
		return InboxEvent{}, apperr.New(apperr.NotFound, "no such inbox event")
	}
	r, err := queries.InboxEventOf(ctx, in.pool, dbsqlc.InboxEventOfParams{ClaimID: id, Tenant: tenant})
	if errors.Is(err, pgx.ErrNoRows) {
		return InboxEvent{}, apperr.New(apperr.NotFound, "no such inbox event")
	}
	if err != nil {
		return InboxEvent{}, db.Error(err)
	}
	e := InboxEvent{ClaimID: r.ClaimID, Source: r.Source, EventID: r.EventID, ClaimState: r.State,
		DispatchState: r.DispatchState, DispatchAttempts: int(r.DispatchAttempts), LastDispatchError: r.LastDispatchError,
		ReceivedAt: r.ReceivedAt, DispatchedAt: r.DispatchedAt, Origin: r.Origin}
	if r.LastDispatchStatus != nil {
		status := int(*r.LastDispatchStatus)
		e.LastDispatchStatus = &status
	}
	x := in.ledger.KeyExpiryOf(r.Scope, claim.State(e.ClaimState), r.UpdatedAt)
	e.KeyExpiresAt, e.KeyExpiry = x.At, x.Kind()
	return e, nil
}

// Replay re-drives a dead-lettered inbox event, as ReplayAs with the
// delivery-log detail "operator replay" and no actor.
func (in *Inbox) Replay(ctx context.Context, tenant, id string) (InboxEvent, error) {
	return in.ReplayAs(ctx, tenant, id, "operator replay", "")
}

// ReplayAs re-drives a dead-lettered inbox event: its dispatch state returns
// to pending with a fresh attempt budget and a new dispatch job is queued,
// in one transaction. The workflow claims by the same key, so a replay
// after a dispatch that did reach n8n is still one effect. Errors:
// NotFound, InvalidState (not dead-lettered); a database error as
// db.Error maps it (a lost connection under the commit: retry, and a
// replay that did commit answers InvalidState, the event being pending).
// note is the detail of its dispatch_replayed delivery-log entry, actor
// the operator's key prefix ("" for none); the caller bounds note.
func (in *Inbox) ReplayAs(ctx context.Context, tenant, id, note, actor string) (InboxEvent, error) {
	cur, err := in.Get(ctx, tenant, id)
	if err != nil {
		return InboxEvent{}, err
	}
	src := in.Source(cur.Source)
	if src == nil {
		return InboxEvent{}, &apperr.Error{Code: apperr.InvalidState, Message: fmt.Sprintf("source %q is no longer configured", cur.Source)}
	}
	err = db.RunTx(ctx, in.pool, func(tx pgx.Tx) error {
		// cur is the caller's tenant's record (Get above); RearmDeadLettered
		// checks the tenant again.
		var by *string
		if actor != "" {
			by = &actor
		}
		rearmed, err := in.rearm(ctx, tx, tenant, id, src, note, by)
		if err == nil && !rearmed {
			err = &apperr.Error{Code: apperr.InvalidState,
				Message: "only dead-lettered inbox events can be replayed; this one is pending or dispatched (or was replayed just now)"}
		}
		return err
	})
	if err != nil {
		return InboxEvent{}, db.Error(err)
	}
	return in.Get(ctx, tenant, id)
}
