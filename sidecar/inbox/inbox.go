package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

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
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
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

// queries runs the package's statements (sidecar/db/queries/inbox.sql).
var queries = dbsqlc.New()

// Inbox stores verified deliveries and dispatches them.
type Inbox struct {
	pool   *pgxpool.Pool
	ledger *claim.Ledger
	river  *river.Client[pgx.Tx]
	cfg    atomic.Pointer[sources.Config]
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
func (in *Inbox) Source(name string) *sources.Source {
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
func (in *Inbox) TriggerSource(name string) *sources.Source {
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
		for _, m := range []map[string]*sources.Source{c.Sources, c.Triggers} {
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
// does (sources.Source.Prepare) and stores them (Store). body is the whole raw
// body; an event's own Payload, when set, is stored instead. headers are
// the forwardable request headers. Errors: as Store, and an authenticated
// *verify.Error for a body that cannot be hashed strictly (nothing is
// written then).
func (in *Inbox) Receive(ctx context.Context, src *sources.Source, events []verify.Event, body []byte, contentType string, headers map[string]string) ([]Receipt, error) {
	prepared, err := src.Prepare(events, body, contentType)
	if err != nil {
		return nil, err
	}
	return in.Store(ctx, src, prepared, nil, headers)
}

// Store stores the prepared events of one verified delivery (sources.Source.Verify
// or sources.Source.Prepare made them) in ONE transaction: per event an inbox
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
// (sources.Verified.Nonce): it is recorded in the same transaction, bound to this
// delivery's events (claim.RecordNoncesTx). Seen before with other events
// (a captured signature carrying another body), the delivery is refused:
// a *verify.Error with CodeBadSignature naming the nonce's field,
// Authenticated false, and nothing is stored. Seen with the same events
// (a provider retry of the very same request), it is stored as any
// redelivery: its receipts say duplicate.
func (in *Inbox) Store(ctx context.Context, src *sources.Source, events []sources.Event, nonce *verify.Nonce, headers map[string]string) ([]Receipt, error) {
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
func (in *Inbox) CheckNonce(ctx context.Context, src *sources.Source, v sources.Verified) error {
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

// rearm puts a dead-lettered dispatch back to pending with a fresh attempt
// budget and queues a new dispatch job, in tx. The conditional UPDATE
// arbitrates concurrent callers: exactly one re-arms. It reports whether
// this call did. A provider's redelivery of an event whose dispatch was
// dead-lettered re-arms it (the provider says the event still matters);
// so does an operator's replay.
func (in *Inbox) rearm(ctx context.Context, tx pgx.Tx, tenant, id string, src *sources.Source, why string, actor *string) (bool, error) {
	rearmed, err := queries.RearmDeadLettered(ctx, tx, dbsqlc.RearmDeadLetteredParams{ClaimID: id, Detail: why, Actor: actor, Tenant: &tenant})
	if err != nil || !rearmed {
		return false, err
	}
	if _, err := in.river.InsertTx(ctx, tx, DispatchArgs{ClaimID: id, Source: src.Name},
		&river.InsertOpts{Queue: sources.QueueName(src.Name), MaxAttempts: riverMaxAttempts}); err != nil {
		return false, fmt.Errorf("enqueue dispatch: %w", err)
	}
	return true, nil
}

// StoredHeaders returns the headers of a delivery to s that are stored
// with its events and forwarded to n8n: ForwardableHeaders with s's
// CredentialHeaders, then, in every value, the query parameters named by
// s's CredentialQueryParams removed (RedactQueryParams): a reverse proxy's
// X-Original-URL or X-Forwarded-Uri, or a Referer, may repeat the webhook
// URL with its ?token=….
func StoredHeaders(s *sources.Source, visit func(func(name, value string))) map[string]string {
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
