package claim

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// DBTX is what the Tx forms of the ledger need: a *pgxpool.Pool, a
// *pgxpool.Conn or a pgx.Tx. Passing the caller's transaction makes the
// ledger write atomic with the caller's own writes.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Observer receives ledger events for metrics. Implementations must be safe
// for concurrent use and must not block.
type Observer interface {
	// Claimed is called once per decided claim, with the record's attempt
	// count after the decision.
	Claimed(source string, o Outcome, attempt int)
	// Completed is called once per completion with the time from the
	// winning claim to completion.
	Completed(source string, claimToComplete time.Duration)
	// Failed is called once per Fail with its kind.
	Failed(source string, kind FailKind)
}

type nopObserver struct{}

func (nopObserver) Claimed(string, Outcome, int)    {}
func (nopObserver) Completed(string, time.Duration) {}
func (nopObserver) Failed(string, FailKind)         {}

// Config configures a Ledger.
type Config struct {
	// Policies per source; zero fields take defaults (see Policy.WithDefaults).
	Policies Policies
	// Jitter returns a uniformly random number in [0, 1) for the full-jitter
	// backoff; default math/rand/v2.Float64. Tests pin it.
	Jitter func() float64
	// Observer receives metrics events; default none.
	Observer Observer
	// MaxDeliveries bounds the delivery-log entries returned by Get and Find;
	// default 1000.
	MaxDeliveries int
}

// Ledger is the claim ledger over PostgreSQL. It is safe for concurrent use
// and holds no state besides its configuration: any number of sidecar
// replicas may share one database.
type Ledger struct {
	pool     *pgxpool.Pool
	policies atomic.Pointer[Policies]
	jitter   func() float64
	obs      Observer
	maxDeliv int
}

// New returns a Ledger over pool. It fails when a policy is invalid.
func New(pool *pgxpool.Pool, cfg Config) (*Ledger, error) {
	l := &Ledger{pool: pool, jitter: cfg.Jitter, obs: cfg.Observer, maxDeliv: cfg.MaxDeliveries}
	if l.jitter == nil {
		l.jitter = rand.Float64
	}
	if l.obs == nil {
		l.obs = nopObserver{}
	}
	if l.maxDeliv <= 0 {
		l.maxDeliv = 1000
	}
	if err := l.SetPolicies(cfg.Policies); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicies replaces the per-source policies (for example on a
// configuration reload). Records keep the lease policy, attempt cap and
// backoff they were created under; the new policies apply to new records
// and to lease lengths.
func (l *Ledger) SetPolicies(ps Policies) error {
	ps = ps.WithDefaults()
	if err := ps.Validate(); err != nil {
		return err
	}
	l.policies.Store(&ps)
	return nil
}

// Policy returns the effective policy of source.
func (l *Ledger) Policy(source string) Policy {
	return l.policies.Load().For(source)
}

// Limits of request fields, in bytes.
const (
	MaxSourceLen    = 200
	MaxEventIDLen   = 1024
	MaxActionLen    = 200
	MaxEventTypeLen = 200
	MaxObjectIDLen  = 500
	MaxExecIDLen    = 200
	MaxResultRefLen = 2000
	MaxErrorLen     = 4000
	MaxNoteLen      = 4000
)

var (
	sourceRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`)
	hashRe   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate checks a claim request against the source policy and returns an
// Invalid *apperr.Error naming the first bad field.
func (l *Ledger) Validate(r Request) error {
	p := l.Policy(r.Source)
	switch {
	case r.Tenant == "":
		return apperr.New(apperr.Unauthorized, "no tenant")
	case r.Source == "":
		return apperr.Field("source", "is required")
	case len(r.Source) > MaxSourceLen:
		return apperr.Field("source", "must be at most %d bytes", MaxSourceLen)
	case !sourceRe.MatchString(r.Source):
		return apperr.Field("source", "must start with a letter or digit and contain only letters, digits and . _ : / -")
	case r.EventID == "":
		return apperr.Field("event_id", "is required")
	case len(r.EventID) > MaxEventIDLen:
		return apperr.Field("event_id", "must be at most %d bytes; hash long keys (key_fields)", MaxEventIDLen)
	case len(r.Action) > MaxActionLen:
		return apperr.Field("action", "must be at most %d bytes", MaxActionLen)
	case len(r.EventType) > MaxEventTypeLen:
		return apperr.Field("event_type", "must be at most %d bytes", MaxEventTypeLen)
	case r.PayloadHash != "" && !hashRe.MatchString(r.PayloadHash):
		return apperr.Field("payload_hash", "must be 64 lowercase hex digits (SHA-256)")
	case r.Lease < 0:
		return apperr.Field("lease_seconds", "cannot be negative")
	case r.Lease > p.MaxLease:
		return apperr.Field("lease_seconds", "must be at most %d for source %q", int(p.MaxLease/time.Second), r.Source)
	case r.Lease != 0 && r.Lease < time.Second:
		return apperr.Field("lease_seconds", "must be at least 1")
	case (r.ObjectID == "") != (r.ObjectVersion == nil):
		if r.ObjectID == "" {
			return apperr.Field("object_id", "is required when object_version is set")
		}
		return apperr.Field("object_version", "is required when object_id is set")
	case len(r.ObjectID) > MaxObjectIDLen:
		return apperr.Field("object_id", "must be at most %d bytes", MaxObjectIDLen)
	case len(r.ExecutionID) > MaxExecIDLen:
		return apperr.Field("execution_id", "must be at most %d bytes", MaxExecIDLen)
	}
	return textFields(map[string]string{"source": r.Source, "event_id": r.EventID, "action": r.Action,
		"event_type": r.EventType, "object_id": r.ObjectID, "execution_id": r.ExecutionID})
}

// storable reports whether s can be stored in a PostgreSQL text column:
// valid UTF-8 without NUL bytes.
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// textFields returns an Invalid error naming the first field (in name
// order) that PostgreSQL text cannot hold.
func textFields(fields map[string]string) error {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !storable(fields[n]) {
			return apperr.Field(n, "must be valid UTF-8 without NUL characters")
		}
	}
	return nil
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// Claim decides one claim attempt in its own transaction. See ClaimTx.
func (l *Ledger) Claim(ctx context.Context, r Request) (Result, error) {
	return l.ClaimTx(ctx, l.pool, r)
}

// ClaimTx decides one claim attempt with a single INSERT … ON CONFLICT
// statement on db (the caller's transaction, or the pool). It returns the
// outcome with the record as it is after the decision; the claim token only
// when the outcome is Won. Errors: *apperr.Error Invalid for a bad request,
// Unavailable when PostgreSQL is unreachable, otherwise an internal error.
func (l *Ledger) ClaimTx(ctx context.Context, db DBTX, r Request) (Result, error) {
	if err := l.Validate(r); err != nil {
		return Result{}, err
	}
	sql, args, token := l.claimArgs(r)
	rec, err := scanRecord(db.QueryRow(ctx, sql, args...))
	if err != nil {
		return Result{}, dbError(err)
	}
	return l.result(rec, token), nil
}

func (l *Ledger) claimArgs(r Request) (string, []any, string) {
	p := l.Policy(r.Source)
	lease := r.Lease
	if lease == 0 {
		lease = p.DefaultLease
	}
	token := uuid.NewString()
	return claimSQL, []any{
		r.Tenant, r.Source, r.EventID, r.Action, nullable(r.EventType), token,
		lease.Seconds(), nullable(r.PayloadHash), nullable(r.ObjectID), r.ObjectVersion,
		p.MaxAttempts, string(p.LeasePolicy), nullable(r.ExecutionID),
		p.BackoffBase.Seconds(), p.BackoffCap.Seconds(),
	}, token
}

func (l *Ledger) result(rec Record, token string) Result {
	res := Result{Outcome: rec.LastOutcome, Record: rec}
	if rec.LastOutcome == Won {
		res.Token = token
	}
	l.obs.Claimed(rec.Source, res.Outcome, rec.Attempt)
	return res
}

// ClaimBatch decides many claim attempts, each on its own, in one round trip.
// reqs must already be valid (see Validate). Results are in request order.
// Claims are sent in key order, so concurrent batches lock rows in the same
// order and cannot deadlock; two requests for one key in a batch are
// decided one after the other (the second sees the first's claim).
// The batch runs in one transaction: on an error no claim of it is kept.
func (l *Ledger) ClaimBatch(ctx context.Context, reqs []Request) ([]Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ra, rb := reqs[order[a]], reqs[order[b]]
		if ra.Tenant != rb.Tenant {
			return ra.Tenant < rb.Tenant
		}
		if ra.Source != rb.Source {
			return ra.Source < rb.Source
		}
		if ra.EventID != rb.EventID {
			return ra.EventID < rb.EventID
		}
		return ra.Action < rb.Action
	})
	tokens := make([]string, len(reqs))
	b := &pgx.Batch{}
	for _, i := range order {
		sql, args, token := l.claimArgs(reqs[i])
		tokens[i] = token
		b.Queue(sql, args...)
	}
	results := make([]Result, len(reqs))
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		br := tx.SendBatch(ctx, b)
		for _, i := range order {
			rec, err := scanRecord(br.QueryRow())
			if err != nil {
				br.Close()
				return err
			}
			results[i] = Result{Outcome: rec.LastOutcome, Record: rec}
		}
		return br.Close()
	})
	if err != nil {
		return nil, dbError(err)
	}
	for i := range results {
		results[i] = l.result(results[i].Record, tokens[i])
	}
	return results, nil
}

// Complete records that the protected effect happened. token must be the
// current claim token; resultRef (may be empty) is the external reference
// of the effect (created record id, message id) returned to later
// duplicates. Completing again with the same token is idempotent.
// Errors: NotFound (no such record for tenant), LeaseLost (token superseded
// or record not processing).
func (l *Ledger) Complete(ctx context.Context, tenant, id, token, resultRef string) (Record, error) {
	if err := checkTokenArgs(id, token); err != nil {
		return Record{}, err
	}
	if len(resultRef) > MaxResultRefLen {
		return Record{}, apperr.Field("result_ref", "must be at most %d bytes", MaxResultRefLen)
	}
	if err := textFields(map[string]string{"result_ref": resultRef}); err != nil {
		return Record{}, err
	}
	rec, err := scanRecord(l.pool.QueryRow(ctx, completeSQL, id, tenant, token, nullable(resultRef), nil))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := l.get(ctx, tenant, id)
		if gerr != nil {
			return Record{}, gerr
		}
		if cur.State == StateCompleted && cur.token == token {
			return cur, nil
		}
		return Record{}, leaseLost(cur)
	}
	if err != nil {
		return Record{}, dbError(err)
	}
	if rec.ClaimedAt != nil && rec.CompletedAt != nil {
		l.obs.Completed(rec.Source, rec.CompletedAt.Sub(*rec.ClaimedAt))
	}
	return rec, nil
}

// Fail records a failed attempt: Retryable backs off (full jitter, capped)
// or dead-letters at the attempt cap; Permanent dead-letters; UnknownOutcome
// moves the record to unknown. msg is stored (not logged) as last_error.
// Errors: Invalid, NotFound, LeaseLost as for Complete.
func (l *Ledger) Fail(ctx context.Context, tenant, id, token string, kind FailKind, msg string) (Record, error) {
	if err := checkTokenArgs(id, token); err != nil {
		return Record{}, err
	}
	switch kind {
	case Retryable, Permanent, UnknownOutcome:
	default:
		return Record{}, apperr.Field("retry", "must be one of retryable, permanent, unknown")
	}
	msg = strings.ToValidUTF8(strings.ReplaceAll(truncate(msg, MaxErrorLen), "\x00", ""), "\uFFFD")
	rec, err := scanRecord(l.pool.QueryRow(ctx, failSQL, id, tenant, token, string(kind), msg, l.jitter()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, l.guardMissed(ctx, tenant, id)
	}
	if err != nil {
		return Record{}, dbError(err)
	}
	l.obs.Failed(rec.Source, kind)
	return rec, nil
}

// Extend moves the lease end of a processing record to now + lease, for
// effects that run long (LLM steps). Errors: Invalid (lease out of range),
// NotFound, LeaseLost.
func (l *Ledger) Extend(ctx context.Context, tenant, id, token string, lease time.Duration) (Record, error) {
	if err := checkTokenArgs(id, token); err != nil {
		return Record{}, err
	}
	if lease < time.Second {
		return Record{}, apperr.Field("lease_seconds", "must be at least 1")
	}
	cur, err := l.get(ctx, tenant, id)
	if err != nil {
		return Record{}, err
	}
	if max := l.Policy(cur.Source).MaxLease; lease > max {
		return Record{}, apperr.Field("lease_seconds", "must be at most %d for source %q", int(max/time.Second), cur.Source)
	}
	rec, err := scanRecord(l.pool.QueryRow(ctx, extendSQL, id, tenant, token, lease.Seconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, l.guardMissed(ctx, tenant, id)
	}
	if err != nil {
		return Record{}, dbError(err)
	}
	return rec, nil
}

// Resolve is an operator's decision on an unknown or dead-lettered record:
// ResolveCompleted (the effect happened; resultRef optional) or ResolveRetry
// (make it claimable again with one more attempt). note is kept in the
// delivery log. Errors: Invalid, NotFound, InvalidState (record in another
// state).
func (l *Ledger) Resolve(ctx context.Context, tenant, id string, outcome ResolveOutcome, resultRef, note string) (Record, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Record{}, apperr.New(apperr.NotFound, "no claim %q", id)
	}
	if outcome != ResolveCompleted && outcome != ResolveRetry {
		return Record{}, apperr.Field("outcome", "must be completed or retry")
	}
	if len(resultRef) > MaxResultRefLen {
		return Record{}, apperr.Field("result_ref", "must be at most %d bytes", MaxResultRefLen)
	}
	if len(note) > MaxNoteLen {
		return Record{}, apperr.Field("note", "must be at most %d bytes", MaxNoteLen)
	}
	if err := textFields(map[string]string{"result_ref": resultRef, "note": note}); err != nil {
		return Record{}, err
	}
	rec, err := scanRecord(l.pool.QueryRow(ctx, resolveSQL, id, tenant, string(outcome), nullable(resultRef), note))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := l.get(ctx, tenant, id)
		if gerr != nil {
			return Record{}, gerr
		}
		return Record{}, &apperr.Error{Code: apperr.InvalidState,
			Message: fmt.Sprintf("only unknown or dead_lettered claims can be resolved; this one is %s", cur.State)}
	}
	if err != nil {
		return Record{}, dbError(err)
	}
	return rec, nil
}

// Get returns the record with its delivery log. Errors: NotFound, also for
// another tenant's record.
func (l *Ledger) Get(ctx context.Context, tenant, id string) (Record, error) {
	rec, err := l.get(ctx, tenant, id)
	if err != nil {
		return Record{}, err
	}
	return l.withDeliveries(ctx, rec)
}

// Find returns the record of key with its delivery log. Errors: NotFound.
func (l *Ledger) Find(ctx context.Context, tenant string, k Key) (Record, error) {
	rec, err := scanRecord(l.pool.QueryRow(ctx, findSQL, tenant, k.Source, k.EventID, k.Action))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, apperr.New(apperr.NotFound, "no claim for this source, event_id and action")
	}
	if err != nil {
		return Record{}, dbError(err)
	}
	return l.withDeliveries(ctx, rec)
}

func (l *Ledger) get(ctx context.Context, tenant, id string) (Record, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Record{}, apperr.New(apperr.NotFound, "no claim %q", id)
	}
	rec, err := scanRecord(l.pool.QueryRow(ctx, getSQL, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, apperr.New(apperr.NotFound, "no claim %q", id)
	}
	if err != nil {
		return Record{}, dbError(err)
	}
	return rec, nil
}

func (l *Ledger) withDeliveries(ctx context.Context, rec Record) (Record, error) {
	rows, err := l.pool.Query(ctx, deliveriesSQL, rec.ID, l.maxDeliv)
	if err != nil {
		return Record{}, dbError(err)
	}
	rec.Deliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := row.Scan(&d.At, &d.Outcome, &d.Attempt, &d.PayloadHash, &d.ExecutionID, &d.Detail)
		return d, err
	})
	if err != nil {
		return Record{}, dbError(err)
	}
	return rec, nil
}

// Purge deletes terminal records (completed, dead_lettered, stale) whose
// last change is older than their source's retention, in batches of at most
// batch rows, until none is left or ctx ends. It returns how many it
// deleted. Records of sources without their own policy use the default
// retention. Safe to run on several replicas at once.
func (l *Ledger) Purge(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		batch = 1000
	}
	ps := l.policies.Load()
	named := make([]string, 0, len(ps.BySource))
	total := 0
	for name, p := range ps.BySource {
		named = append(named, name)
		n, err := l.purgeSet(ctx, []string{name}, false, p.Retention, batch)
		total += n
		if err != nil {
			return total, err
		}
	}
	n, err := l.purgeSet(ctx, named, true, ps.Default.Retention, batch)
	return total + n, err
}

func (l *Ledger) purgeSet(ctx context.Context, sources []string, exclude bool, retention time.Duration, batch int) (int, error) {
	total := 0
	for {
		tag, err := l.pool.Exec(ctx, purgeSQL, sources, retention.Seconds(), batch, exclude)
		if err != nil {
			return total, dbError(err)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// SweepExpiredLeases moves processing records whose lease expired under
// lease policy review to unknown, in batches of at most batch rows. (Under
// policy reclaim an expired lease simply lets the next claim win.) It
// returns how many it moved.
func (l *Ledger) SweepExpiredLeases(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		batch = 1000
	}
	total := 0
	for {
		var n int
		if err := l.pool.QueryRow(ctx, sweepSQL, batch).Scan(&n); err != nil {
			return total, dbError(err)
		}
		total += n
		if n < batch {
			return total, nil
		}
	}
}

// Stats is a snapshot of open records for the gauges.
type Stats struct {
	Unknown, DeadLettered, Processing, RetryableFailed, Received int64
	// OldestProcessing is the age of the oldest processing claim, and
	// OldestReceived of the oldest received (not yet claimed) inbox event.
	OldestProcessing, OldestReceived time.Duration
	// DispatchPending and DispatchDeadLettered count inbox events waiting
	// for dispatch and those whose dispatch was dead-lettered.
	DispatchPending, DispatchDeadLettered int64
}

// Stats counts open records across all tenants.
func (l *Ledger) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var op, or float64
	err := l.pool.QueryRow(ctx, statsSQL).Scan(&s.Unknown, &s.DeadLettered, &s.Processing,
		&s.RetryableFailed, &s.Received, &op, &or, &s.DispatchPending, &s.DispatchDeadLettered)
	if err != nil {
		return Stats{}, dbError(err)
	}
	s.OldestProcessing = time.Duration(op * float64(time.Second))
	s.OldestReceived = time.Duration(or * float64(time.Second))
	return s, nil
}

func checkTokenArgs(id, token string) error {
	if _, err := uuid.Parse(id); err != nil {
		return apperr.New(apperr.NotFound, "no claim %q", id)
	}
	if token == "" {
		return apperr.Field("claim_token", "is required")
	}
	if _, err := uuid.Parse(token); err != nil {
		return apperr.Field("claim_token", "is not a claim token")
	}
	return nil
}

// guardMissed explains why a token-guarded update matched no row: the
// record does not exist for tenant (NotFound) or the token is no longer
// current (LeaseLost).
func (l *Ledger) guardMissed(ctx context.Context, tenant, id string) error {
	cur, err := l.get(ctx, tenant, id)
	if err != nil {
		return err
	}
	return leaseLost(cur)
}

func leaseLost(cur Record) error {
	return &apperr.Error{Code: apperr.LeaseLost, Message: fmt.Sprintf(
		"lease lost: this claim token is no longer current; the claim is %s at attempt %d, "+
			"so another holder may have reclaimed it. Do not report a result for it.", cur.State, cur.Attempt)}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// scanRecord scans recordColumns, then extra destinations for columns
// selected after them.
func scanRecord(row pgx.Row, extra ...any) (Record, error) {
	var r Record
	var token *string
	dest := append([]any{&r.ID, &r.Tenant, &r.Source, &r.EventID, &r.Action, &r.EventType, &r.State,
		&r.LastOutcome, &r.Attempt, &r.MaxAttempts, &r.LeasePolicy, &r.LeaseUntil, &r.NextAttemptAt,
		&r.PayloadHash, &r.ResultRef, &r.LastError, &r.ObjectID, &r.ObjectVersion, &r.ConflictCount,
		&r.CreatedAt, &r.UpdatedAt, &r.ClaimedAt, &r.CompletedAt, &token, &r.ReceiptHash}, extra...)
	err := row.Scan(dest...)
	if err != nil {
		return Record{}, err
	}
	if token != nil {
		r.token = *token
	}
	r.IdempotencyKey = IdempotencyKey(r.Tenant, r.Key)
	return r, nil
}

// dbError turns driver errors into application errors at the database edge.
func dbError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &apperr.Error{Code: apperr.Unavailable, Message: "the request timed out waiting for the database", Err: err}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "57", "53": // connection exception, operator intervention, insufficient resources
			return &apperr.Error{Code: apperr.Unavailable, Message: "the database is unavailable", Err: err}
		case "40": // serialization failure, deadlock
			return &apperr.Error{Code: apperr.Unavailable, Message: "the database asked to retry", Err: err}
		}
		return fmt.Errorf("database: %w", err)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.SafeToRetry(err) || errors.Is(err, puddle.ErrClosedPool) {
		return &apperr.Error{Code: apperr.Unavailable, Message: "the database is unreachable", Err: err}
	}
	return fmt.Errorf("database: %w", err)
}

// Page sizes of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 500
)

// OpenStates are the states List accepts: records an operator or a retry
// may still act on.
var OpenStates = []State{StateReceived, StateProcessing, StateRetryableFailed, StateDeadLettered, StateUnknown}

// ListFilter selects the records of List.
type ListFilter struct {
	// State is required and must be one of OpenStates.
	State State
	// Source, when not empty, keeps only the records of that source.
	Source string
	// Limit is the page size, 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the next cursor of the previous page; empty for the first.
	Cursor string
}

// List returns one page of tenant's records in state f.State, oldest first
// by (updated_at, id), without delivery logs, and the cursor of the next
// page: empty when there is no more. The cursor is opaque to callers (it is
// the base64url, unpadded, of the last record's updated_at in RFC 3339 with
// nanoseconds, "|", and its id). A record that changes while a caller pages
// moves to the end (or out of the state) and may be seen again or not at all.
// Errors: Invalid naming state, source, limit or cursor; Unavailable.
func (l *Ledger) List(ctx context.Context, tenant string, f ListFilter) ([]Record, string, error) {
	if tenant == "" {
		return nil, "", apperr.New(apperr.Unauthorized, "no tenant")
	}
	open := false
	for _, s := range OpenStates {
		open = open || f.State == s
	}
	switch {
	case f.State == "":
		return nil, "", apperr.Field("state", "is required")
	case !open:
		return nil, "", apperr.Field("state", "must be one of received, processing, retryable_failed, dead_lettered, unknown")
	case len(f.Source) > MaxSourceLen:
		return nil, "", apperr.Field("source", "must be at most %d bytes", MaxSourceLen)
	case f.Source != "" && !sourceRe.MatchString(f.Source):
		return nil, "", apperr.Field("source", "must start with a letter or digit and contain only letters, digits and . _ : / -")
	case f.Limit < 0 || f.Limit > MaxListLimit:
		return nil, "", apperr.Field("limit", "must be from 1 to %d", MaxListLimit)
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	var after *time.Time
	var afterID *string
	if f.Cursor != "" {
		at, id, ok := decodeCursor(f.Cursor)
		if !ok {
			return nil, "", apperr.Field("cursor", "is not a next_cursor of this list")
		}
		after, afterID = &at, &id
	}
	rows, err := l.pool.Query(ctx, listSQL, tenant, string(f.State), nullable(f.Source), after, afterID, limit+1)
	if err != nil {
		return nil, "", dbError(err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanRecord(row) })
	if err != nil {
		return nil, "", dbError(err)
	}
	if len(recs) <= limit {
		return recs, "", nil
	}
	recs = recs[:limit]
	last := recs[limit-1]
	return recs, encodeCursor(last.UpdatedAt, last.ID), nil
}

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

func decodeCursor(c string) (time.Time, string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(c, "="))
	if err != nil {
		return time.Time{}, "", false
	}
	ts, id, found := strings.Cut(string(raw), "|")
	if !found {
		return time.Time{}, "", false
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", false
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, "", false
	}
	return at, u.String(), true
}
