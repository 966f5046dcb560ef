package claim

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
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

// DuplicateObserver is an Observer that is also told the cause of every
// duplicate (and in_progress) copy the ledger logs: source is the
// record's source (the scope) for a claim, the door (source name) for a
// delivery to the ingest door, which tells it too (inbox.Inbox).
type DuplicateObserver interface {
	Duplicated(source string, c Cause)
}

// GroupObserver is an Observer that is also told the size of every group
// (groupcommit.go) a Ledger runs: kind "claim" or "settle", n calls.
type GroupObserver interface {
	Grouped(kind string, n int)
}

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
	// Group sets group commit of Claim, Complete and Fail (groupcommit.go); nil
	// is DefaultGroupConfig, Workers 0 turns it off.
	Group *GroupConfig
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
	hints    retryHints // estimates of RetryAfter (hint.go)
	// claims and settles group concurrent calls (groupcommit.go); nil when
	// grouping is off.
	claims  *group.Grouper[Request, Result]
	settles *group.Grouper[settleItem, Settled]
	group   GroupConfig // as New resolved it
}

// New returns a Ledger over pool. It fails when a policy is invalid.
// The ledger's statements are written for READ COMMITTED: build pool with
// db.ConfigurePool so that its sessions run at it whatever the database's
// defaults. The ledger's own transactions set it explicitly (db.RunTx), and
// its writes are run again on a serialization failure or deadlock.
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
	gc := DefaultGroupConfig()
	if cfg.Group != nil {
		gc = cfg.Group.withDefaults()
	}
	l.group = gc
	if gc.Workers > 0 {
		observe := func(kind string) func(int) {
			if o, ok := l.obs.(GroupObserver); ok {
				return func(n int) { o.Grouped(kind, n) }
			}
			return nil
		}
		l.claims = group.New(gc.groupConfig(), l.runClaims, db.Error, observe("claim"))
		l.settles = group.New(gc.groupConfig(), l.runSettles, db.Error, observe("settle"))
	}
	return l, nil
}

// GroupConfig is the ledger's group commit setting as New resolved it
// (defaults filled in; Workers 0 when grouping is off), for other groups
// of the process (ingest receipts) to follow.
func (l *Ledger) GroupConfig() GroupConfig { return l.group }

// SetPolicies replaces the per-source policies (for example on a
// configuration reload). Records keep the attempt cap and backoff they were
// created under; the new policies apply to new records and to lease
// lengths. A record's lease policy is set by each claim that wins it (the
// claim's own lease_policy, else its source's policy at that time), so the
// new policies also apply to the next attempt of an existing record; a
// lease already running keeps the policy it was won under.
func (l *Ledger) SetPolicies(ps Policies) error {
	ps = ps.WithDefaults()
	if err := ps.Validate(); err != nil {
		return err
	}
	l.policies.Store(&ps)
	return nil
}

// Configured reports whether the sources file in force names source (an
// ingest door, a trigger source or a claim-only source): it has a policy
// of its own, not only the default.
func (l *Ledger) Configured(source string) bool {
	_, ok := l.policies.Load().BySource[source]
	return ok
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
	MaxRequestIDLen = 200
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
	case r.LeasePolicy != "" && r.LeasePolicy != Reclaim && r.LeasePolicy != Review:
		return apperr.Field("lease_policy", "must be %q or %q", Reclaim, Review)
	case len(r.ExecutionID) > MaxExecIDLen:
		return apperr.Field("execution_id", "must be at most %d bytes", MaxExecIDLen)
	case len(r.RequestID) > MaxRequestIDLen:
		return apperr.Field("request_id", "must be at most %d bytes", MaxRequestIDLen)
	case len(r.ExecutionMode) > MaxExecutionModeLen:
		return apperr.Field("execution_mode", "must be at most %d bytes", MaxExecutionModeLen)
	}
	if err := CheckWorkflow(r.WorkflowID, r.WorkflowVersion); err != nil {
		return err
	}
	if err := l.checkReconciler(r.Reconciler); err != nil {
		return err
	}
	return textFields(map[string]string{"source": r.Source, "event_id": r.EventID, "action": r.Action,
		"event_type": r.EventType, "object_id": r.ObjectID, "execution_id": r.ExecutionID,
		"request_id": r.RequestID, "execution_mode": r.ExecutionMode, "door": r.Door, "retry_signal": r.RetrySignal})
}

// checkReconciler returns an Invalid error naming reconciler unless name
// is "" or a configured reconciler (Policies.Reconcilers). The error does
// not quote the name.
func (l *Ledger) checkReconciler(name string) error {
	if _, ok := l.policies.Load().Reconcilers[name]; name != "" && !ok {
		return apperr.Field("reconciler", "must name a configured reconciler")
	}
	return nil
}

// CheckWorkflow returns an Invalid *apperr.Error naming workflow_id or
// workflow_version when either is longer than MaxWorkflowFieldLen bytes
// or holds anything but printable ASCII without spaces; nil otherwise
// ("" is valid: unknown). The error quotes neither value.
func CheckWorkflow(id, version string) error {
	switch {
	case len(id) > MaxWorkflowFieldLen:
		return apperr.Field("workflow_id", "must be at most %d bytes", MaxWorkflowFieldLen)
	case !printable(id):
		return apperr.Field("workflow_id", "must be printable ASCII without spaces")
	case len(version) > MaxWorkflowFieldLen:
		return apperr.Field("workflow_version", "must be at most %d bytes", MaxWorkflowFieldLen)
	case !printable(version):
		return apperr.Field("workflow_version", "must be printable ASCII without spaces")
	}
	return nil
}

// printable reports whether s holds only printable ASCII without
// spaces (0x21 to 0x7E): ids people read in the delivery log.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
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

// Claim decides one claim attempt, as ClaimTx decides it. Concurrent
// calls share transactions (group commit, groupcommit.go); the answer is
// returned once the decision is committed. A serialization failure or
// deadlock is retried here (a few times, see db.RunTx) before it is reported
// as Unavailable. Errors: as ClaimTx; the context's error when ctx ends
// first (the claim may then still have been decided: the same request,
// with its request id, gets a win back).
func (l *Ledger) Claim(ctx context.Context, r Request) (Result, error) {
	r = l.shadowed(r)
	if err := l.Validate(r); err != nil {
		return Result{}, err
	}
	if l.claims == nil {
		return l.claimAlone(ctx, r)
	}
	return l.claims.Do(ctx, r)
}

// claimAlone decides the valid claim r with one statement in a
// transaction of its own.
func (l *Ledger) claimAlone(ctx context.Context, r Request) (Result, error) {
	var res Result
	err := db.Retry(ctx, func() error {
		return db.OnPoolConn(ctx, l.pool, func(c *pgxpool.Conn) (err error) {
			res, err = l.claimValid(ctx, c, r)
			return err
		})
	})
	return res, db.Error(err) // claimValid's errors already are; a failed acquisition is not
}

// runClaims decides a group of valid claims (the group.Grouper's run).
func (l *Ledger) runClaims(ctx context.Context, calls []*group.Call[Request, Result]) {
	if len(calls) == 1 {
		calls[0].Finish(l.claimAlone(ctx, calls[0].Item))
		return
	}
	reqs := make([]Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.Item
	}
	var recs []Record
	err := db.Retry(ctx, func() (err error) {
		recs, err = l.claimPipelined(ctx, reqs)
		return err
	})
	switch {
	case err == nil:
		for i, c := range calls {
			c.Finish(l.result(recs[i], c.Item.Shadow), nil)
		}
	case db.Retryable(err):
		err = db.Error(err)
		for _, c := range calls {
			c.Finish(Result{}, err)
		}
	default:
		// Perhaps one claim's statement: each alone, so that it fails alone.
		for _, c := range calls {
			c.Finish(l.claimAlone(ctx, c.Item))
		}
	}
}

// claimPipelined decides the claims of reqs in one round trip and one
// transaction: in key order, as few ClaimMany statements as it takes
// for the keys of each to be distinct (a key claimed twice in the group is
// decided once per statement, the second on the record the first left, as
// two transactions would be), pipelined in one batch that PostgreSQL runs
// in its implicit transaction, committed at its end. It returns their
// records in reqs order. The statements run on their cached generic plan
// (ForceGenericPlan, first in the batch), never planned afresh.
//
// Every key a later statement locks was locked by the first one already,
// so a group locks rows in key order, as every other group and batch does.
func (l *Ledger) claimPipelined(ctx context.Context, reqs []Request) ([]Record, error) {
	var recs []Record
	err := db.OnPoolConn(ctx, l.pool, func(c *pgxpool.Conn) (err error) {
		recs, err = l.claimMany(ctx, c, reqs)
		return err
	})
	return recs, err
}

// batchSender is a pool, a connection or a transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claimMany sends the claims of reqs on q as claimPipelined describes
// (on a transaction: inside it) and returns their records in reqs order.
// ForceGenericPlan goes first: on a transaction its setting holds until the
// transaction ends, so q is the pool or a transaction of the ledger's own
// (ClaimBatch), never a caller's.
func (l *Ledger) claimMany(ctx context.Context, q batchSender, reqs []Request) ([]Record, error) {
	rounds := distinctRounds(reqs, KeyOrder(reqs))
	b := &pgx.Batch{}
	queue := db.Queue(b)
	_ = queries.ForceGenericPlan(ctx, queue)
	for _, round := range rounds {
		_, _ = queries.ClaimMany(ctx, queue, l.claimManyParams(reqs, round))
	}
	recs := make([]Record, len(reqs))
	results := db.Results(q.SendBatch(ctx, b))
	if err := queries.ForceGenericPlan(ctx, results); err != nil {
		results.Close()
		return nil, err
	}
	for _, round := range rounds {
		byKey := make(map[fullKey]int, len(round))
		for _, i := range round {
			byKey[reqs[i].parts()] = i
		}
		rows, err := queries.ClaimMany(ctx, results, dbsqlc.ClaimManyParams{})
		if err != nil {
			results.Close()
			return nil, err
		}
		for _, row := range rows {
			rec := claimedOf(dbsqlc.ClaimOneRow(row))
			i, ok := byKey[fullKey{rec.Tenant, rec.Source, rec.EventID, rec.Action}]
			if !ok {
				results.Close()
				return nil, fmt.Errorf("claim group: the database returned a record of a key not in the group")
			}
			recs[i] = rec
		}
		if len(rows) != len(round) {
			results.Close()
			return nil, fmt.Errorf("claim group: %d records for %d claims", len(rows), len(round))
		}
	}
	return recs, results.Close()
}

// fullKey is a claim's key as a comparable value: tenant,
// source, event id, action.
type fullKey struct{ Tenant, Source, EventID, Action string }

func (r Request) parts() fullKey {
	return fullKey{r.Tenant, r.Source, r.EventID, r.Action}
}

// distinctRounds splits order (indexes of reqs, in key order) into rounds
// whose keys are distinct, each in key order: the k-th claim of every key
// goes to round k.
func distinctRounds(reqs []Request, order []int) [][]int {
	var rounds [][]int
	seen := make(map[fullKey]int, len(order))
	for _, i := range order {
		k := reqs[i].parts()
		n := seen[k]
		seen[k] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	return rounds
}

// claimManyParams returns ClaimMany's arguments for the claims
// reqs[idx...], in idx order, each with a fresh claim token proposed
// (the empty string and 0 for what a claim does not carry, see ClaimMany).
func (l *Ledger) claimManyParams(reqs []Request, idx []int) dbsqlc.ClaimManyParams {
	n := len(idx)
	strs := func() []string { return make([]string, n) }
	floats := func() []float64 { return make([]float64, n) }
	a := dbsqlc.ClaimManyParams{Tenants: strs(), Sources: strs(), EventIDs: strs(), Actions: strs(),
		EventTypes: strs(), Tokens: strs(), LeaseSeconds: floats(), PayloadHashes: strs(), ObjectIDs: strs(),
		ObjectVersions: make([]int64, n), MaxAttempts: make([]int32, n), LeasePolicies: strs(), ExecutionIDs: strs(),
		BackoffBaseSeconds: floats(), BackoffCapSeconds: floats(), RequestIDs: strs(), Doors: strs(),
		Fingerprints: make([][]byte, n), Retries: strs(), Modes: strs(), Shadows: make([]bool, n),
		WorkflowIDs: strs(), WorkflowVersions: strs(), Reconcilers: strs()}
	for j, i := range idx {
		r := reqs[i]
		p := l.Policy(r.Source)
		a.Tenants[j], a.Sources[j], a.EventIDs[j], a.Actions[j] = r.Tenant, r.Source, r.EventID, r.Action
		a.EventTypes[j], a.Tokens[j], a.LeaseSeconds[j] = r.EventType, uuid.NewString(), r.leaseOr(p).Seconds()
		a.PayloadHashes[j], a.ObjectIDs[j] = r.PayloadHash, r.ObjectID
		if r.ObjectVersion != nil {
			a.ObjectVersions[j] = *r.ObjectVersion
		}
		a.MaxAttempts[j], a.LeasePolicies[j] = int32(p.MaxAttempts), string(r.leasePolicy(p))
		a.ExecutionIDs[j], a.RequestIDs[j] = r.ExecutionID, r.RequestID
		a.BackoffBaseSeconds[j], a.BackoffCapSeconds[j] = p.BackoffBase.Seconds(), p.BackoffCap.Seconds()
		a.Doors[j], a.Fingerprints[j], a.Retries[j], a.Modes[j] = r.Door, r.Fingerprint, r.RetrySignal, r.ExecutionMode
		a.Shadows[j], a.WorkflowIDs[j], a.WorkflowVersions[j] = r.Shadow, r.WorkflowID, r.WorkflowVersion
		a.Reconcilers[j] = r.Reconciler
	}
	return a
}

// KeyOrder returns the indexes of reqs sorted by key (tenant, source,
// event id, action), stable (two requests for one key keep their order):
// the order every batch and group locks claims rows in. A transaction
// that writes claims rows of several keys writes them in this order, so
// that it never deadlocks with a batch or group of the ledger.
func KeyOrder(reqs []Request) []int {
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
	return order
}

// ClaimTx decides one claim attempt with a single INSERT … ON CONFLICT
// statement on q (the caller's transaction, or the pool). It returns the
// outcome with the record as it is after the decision; the claim token only
// when the outcome is Won. Errors: *apperr.Error Invalid for a bad request,
// Unavailable for a database error that means "try again" (db.Error: the
// database unreachable or read-only, the connection lost, …), otherwise an
// internal error.
// A serialization failure or deadlock (db.RetryableTx) aborts the caller's
// transaction: run the whole of it again (db.RunTx does).
func (l *Ledger) ClaimTx(ctx context.Context, q DBTX, r Request) (Result, error) {
	r = l.shadowed(r)
	if err := l.Validate(r); err != nil {
		return Result{}, err
	}
	return l.claimValid(ctx, q, r)
}

// claimValid is ClaimTx of a claim already validated.
func (l *Ledger) claimValid(ctx context.Context, q DBTX, r Request) (Result, error) {
	row, err := queries.ClaimOne(ctx, q, l.claimParams(r))
	if err != nil {
		return Result{}, db.Error(err)
	}
	return l.result(claimedOf(row), r.Shadow), nil
}

// claimParams returns ClaimOne's arguments for r, with a fresh claim
// token proposed for a win.
func (l *Ledger) claimParams(r Request) dbsqlc.ClaimOneParams {
	p := l.Policy(r.Source)
	return dbsqlc.ClaimOneParams{Tenant: r.Tenant, Source: r.Source, EventID: r.EventID, Action: r.Action,
		EventType: nullable(r.EventType), Token: uuid.NewString(), LeaseSeconds: r.leaseOr(p).Seconds(),
		PayloadHash: nullable(r.PayloadHash), ObjectID: nullable(r.ObjectID), ObjectVersion: r.ObjectVersion,
		MaxAttempts: int32(p.MaxAttempts), LeasePolicy: string(r.leasePolicy(p)), ExecutionID: nullable(r.ExecutionID),
		BackoffBaseSeconds: p.BackoffBase.Seconds(), BackoffCapSeconds: p.BackoffCap.Seconds(),
		RequestID: nullable(r.RequestID), Door: nullable(r.Door), Fingerprint: r.Fingerprint,
		Retry: nullable(r.RetrySignal), Mode: nullable(r.ExecutionMode), Shadow: r.Shadow,
		WorkflowID: nullable(r.WorkflowID), WorkflowVersion: nullable(r.WorkflowVersion),
		Reconciler: nullable(r.Reconciler)}
}

// leaseOr is the lease r asks for, else the source policy p's default.
func (r Request) leaseOr(p Policy) time.Duration {
	if r.Lease == 0 {
		return p.DefaultLease
	}
	return r.Lease
}

// leasePolicy is the lease policy a win of r stores: r's own, else the
// source policy p's.
func (r Request) leasePolicy(p Policy) LeasePolicy {
	if r.LeasePolicy != "" {
		return r.LeasePolicy
	}
	return p.LeasePolicy
}

// result is the answer for rec as the claim statement left it. A win carries the
// record's claim token: the one this request proposed, or, for a replay of
// the winning request (same request id), the one it won before. A shadow
// claim's answer is Won with the decision in WouldBe (shadowAnswer).
func (l *Ledger) result(rec Record, shadow bool) Result {
	res := Result{Outcome: rec.LastOutcome, Record: rec, Cause: rec.cause}
	if rec.LastOutcome == Won {
		res.Token = rec.token
	}
	if shadow {
		res = l.shadowAnswer(res)
		l.obs.Claimed(rec.Source, res.Outcome, rec.Attempt)
		return res
	}
	l.obs.Claimed(rec.Source, res.Outcome, rec.Attempt)
	if res.Cause != "" {
		if o, ok := l.obs.(DuplicateObserver); ok {
			o.Duplicated(rec.Source, res.Cause)
		}
	}
	return res
}

// ClaimBatch decides many claim attempts, each on its own, in one round trip
// (as few multi-row statements as its keys allow, see claimPipelined; a
// batch of one claim is decided by the single-claim statement, as Claim
// alone decides it). reqs must already be valid (see Validate). Results
// are in request order.
// Claims are sent in key order, so concurrent batches lock rows in the same
// order and cannot deadlock; two requests for one key in a batch are
// decided one after the other (the second sees the first's claim).
// The batch runs in one READ COMMITTED transaction (db.RunTx): on an error no
// claim of it is kept, unless the connection was lost under the commit
// (db.OutcomeUnknown: the same batch again, with the same request ids, gets
// its wins back); after a serialization failure or deadlock the whole
// batch is decided again.
func (l *Ledger) ClaimBatch(ctx context.Context, reqs []Request) ([]Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	reqs = l.shadowedAll(reqs)
	var recs []Record
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) (err error) {
		if len(reqs) == 1 {
			// The single-claim statement, as Claim alone: PostgreSQL
			// runs it on its cached generic plan after its first runs,
			// without ClaimMany's arrays and plan setting
			// (ForceGenericPlan).
			row, err := queries.ClaimOne(ctx, tx, l.claimParams(reqs[0]))
			if err != nil {
				return err
			}
			recs = []Record{claimedOf(row)}
			return nil
		}
		recs, err = l.claimMany(ctx, tx, reqs)
		return err
	})
	if err != nil {
		return nil, db.Error(err)
	}
	results := make([]Result, len(reqs))
	for i := range results {
		results[i] = l.result(recs[i], reqs[i].Shadow)
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
	return l.settle(ctx, l.completion(tenant, Completion{ID: id, Token: token, ResultRef: resultRef}))
}

// Fail records a failed attempt: Retryable backs off (full jitter, capped)
// or dead-letters at the attempt cap; Permanent dead-letters; UnknownOutcome
// moves the record to unknown. msg is stored (not logged) as last_error.
// Failing again with the same token, kind and msg while the record is still
// as that Fail left it answers the record (idempotent: a retry whose answer
// was lost).
// Errors: Invalid, NotFound, LeaseLost as for Complete.
func (l *Ledger) Fail(ctx context.Context, tenant, id, token string, kind FailKind, msg string) (Record, error) {
	return l.settle(ctx, l.failure(tenant, Failure{ID: id, Token: token, Kind: kind, Error: msg}))
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
	rec, err := l.writeRow(ctx, func(q dbsqlc.DBTX) (dbsqlc.RecordRow, error) {
		row, err := queries.Extend(ctx, q, dbsqlc.ExtendParams{ID: id, Tenant: tenant, Token: token, LeaseSeconds: lease.Seconds()})
		return dbsqlc.RecordRow(row), err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, l.guardMissed(ctx, tenant, id)
	}
	if err != nil {
		return Record{}, db.Error(err)
	}
	return rec, nil
}

// Resolve is an operator's decision on an unknown or dead-lettered record,
// as ResolveAs with no actor.
func (l *Ledger) Resolve(ctx context.Context, tenant, id string, outcome ResolveOutcome, resultRef, note string) (Record, error) {
	return l.ResolveAs(ctx, tenant, id, outcome, resultRef, note, "")
}

// ResolveAs is an operator's decision on an unknown or dead-lettered
// record: ResolveCompleted (the effect happened; resultRef optional),
// ResolveRetry (make it claimable again with one more attempt) or
// ResolveFailed (an unknown record becomes dead_lettered). note is kept
// in the delivery log, with actor (the operator's key prefix, "" for
// none). Errors: Invalid naming outcome, result_ref or note; NotFound,
// also for another tenant's record; InvalidState (record in another
// state, or dead-lettered for ResolveFailed).
func (l *Ledger) ResolveAs(ctx context.Context, tenant, id string, outcome ResolveOutcome, resultRef, note, actor string) (Record, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Record{}, apperr.New(apperr.NotFound, "no such claim")
	}
	if outcome != ResolveCompleted && outcome != ResolveRetry && outcome != ResolveFailed {
		return Record{}, apperr.Field("outcome", "must be completed, retry or failed")
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
	rec, err := l.writeRow(ctx, func(q dbsqlc.DBTX) (dbsqlc.RecordRow, error) {
		row, err := queries.Resolve(ctx, q, dbsqlc.ResolveParams{ID: id, Tenant: tenant, Outcome: string(outcome),
			ResultRef: nullable(resultRef), Note: note, Actor: nullable(actor)})
		return dbsqlc.RecordRow(row), err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := l.get(ctx, tenant, id)
		if gerr != nil {
			return Record{}, gerr
		}
		if outcome == ResolveFailed && cur.State == StateDeadLettered {
			return Record{}, &apperr.Error{Code: apperr.InvalidState,
				Message: "this claim is dead_lettered already; resolve it as completed or retry"}
		}
		return Record{}, &apperr.Error{Code: apperr.InvalidState,
			Message: fmt.Sprintf("only unknown or dead_lettered claims can be resolved; this one is %s", cur.State)}
	}
	if err != nil {
		return Record{}, db.Error(err)
	}
	return rec, nil
}

// Release moves a stuck processing record to unknown, as a lease expiry
// under policy review would, at once and whatever its policy or lease end
// (see Release in sidecar/db/queries/claim.sql): the holder's Complete still
// lands, its Fail and Extend answer LeaseLost, and claims of the key answer
// Unknown until an operator resolves it. note (required, at most MaxNoteLen
// bytes) and actor (the operator's key prefix) go into the delivery log.
// Errors: Invalid naming note; NotFound, also for another tenant's record;
// InvalidState (not processing, or left processing just now).
func (l *Ledger) Release(ctx context.Context, tenant, id, note, actor string) (Record, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Record{}, apperr.New(apperr.NotFound, "no such claim")
	}
	if err := checkNote(note); err != nil {
		return Record{}, err
	}
	rec, err := l.writeRow(ctx, func(q dbsqlc.DBTX) (dbsqlc.RecordRow, error) {
		row, err := queries.Release(ctx, q, dbsqlc.ReleaseParams{ID: id, Tenant: tenant, Note: note, Actor: nullable(actor)})
		return dbsqlc.RecordRow(row), err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := l.get(ctx, tenant, id)
		if gerr != nil {
			return Record{}, gerr
		}
		return Record{}, &apperr.Error{Code: apperr.InvalidState,
			Message: fmt.Sprintf("only processing claims can be released to unknown; this one is %s", cur.State)}
	}
	if err != nil {
		return Record{}, db.Error(err)
	}
	return rec, nil
}

// checkNote returns an Invalid error naming note unless it is a non-blank
// text of at most MaxNoteLen bytes.
func checkNote(note string) error {
	switch {
	case strings.TrimSpace(note) == "":
		return apperr.Field("note", "is required: say why, for the delivery log")
	case len(note) > MaxNoteLen:
		return apperr.Field("note", "must be at most %d bytes", MaxNoteLen)
	}
	return textFields(map[string]string{"note": note})
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
	row, err := queries.RecordByKey(ctx, l.pool, dbsqlc.RecordByKeyParams{Tenant: tenant, Source: k.Source,
		EventID: k.EventID, Action: k.Action})
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, apperr.New(apperr.NotFound, "no claim for this source, event_id and action")
	}
	if err != nil {
		return Record{}, db.Error(err)
	}
	return l.withDeliveries(ctx, recordOf(dbsqlc.RecordRow(row)))
}

func (l *Ledger) get(ctx context.Context, tenant, id string) (Record, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Record{}, apperr.New(apperr.NotFound, "no such claim")
	}
	row, err := queries.Record(ctx, l.pool, dbsqlc.RecordParams{ID: id, Tenant: tenant})
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, apperr.New(apperr.NotFound, "no such claim")
	}
	if err != nil {
		return Record{}, db.Error(err)
	}
	return recordOf(row), nil
}

func (l *Ledger) withDeliveries(ctx context.Context, rec Record) (Record, error) {
	rows, err := queries.Deliveries(ctx, l.pool, dbsqlc.DeliveriesParams{ClaimID: rec.ID, MaxEntries: int32(l.maxDeliv)})
	if err != nil {
		return Record{}, db.Error(err)
	}
	rec.Deliveries = make([]Delivery, len(rows))
	for i, d := range rows {
		rec.Deliveries[i] = Delivery{At: d.At, Outcome: d.Outcome, Attempt: int(d.Attempt), PayloadHash: d.PayloadHash,
			ExecutionID: d.ExecutionID, Detail: d.Detail, Actor: d.Actor, Door: d.Door, Cause: Cause(d.Cause),
			CauseNote: d.CauseNote, Shadow: d.Shadow, WorkflowID: d.WorkflowID, WorkflowVersion: d.WorkflowVersion}
	}
	return rec, nil
}

// PurgeResult counts what one Purge removed.
type PurgeResult struct {
	// KeysDeleted counts records deleted after their key retention, with
	// whatever payload and delivery log they still held.
	KeysDeleted int
	// PayloadsPurged counts records whose payload was removed after their
	// payload retention (inbox body and headers, conflict bodies, delivery
	// log, last_error); each keeps its key, hashes and final outcome.
	PayloadsPurged int
	// ConflictsPurged counts bodies of conflicting deliveries that arrived
	// after their record's payload purge, removed once as old as the
	// payload retention.
	ConflictsPurged int
	// NoncesPurged counts expired one-time values of the replay check
	// (delivery_nonces, see RecordNoncesTx) deleted.
	NoncesPurged int
}

// Purge applies the two retentions of every source to terminal records
// (completed, dead_lettered, stale; open records are never purged), in
// batches of at most batch rows, until nothing is due or ctx ends:
//
//   - past the key retention (Policy.KeyRetention) after its last change,
//     a record is deleted, and a later delivery of its key is a new event;
//   - past the payload retention (Policy.Retention), its payload is removed
//     (its inbox body and headers, bodies of conflicting deliveries, its
//     delivery log, replaced by one payload_purged entry, and last_error)
//     and the record kept: a redelivery or a claim of the key is still a
//     duplicate with its result_ref, or a conflict when its hash differs.
//
// Records of sources without their own policy follow the default policy.
// Expired one-time values of the replay check (RecordNoncesTx) are
// deleted too, whatever the policies, in batches as well. Safe to run on
// several replicas at once (rows another transaction holds are skipped).
// On an error it returns what it removed so far.
func (l *Ledger) Purge(ctx context.Context, batch int) (PurgeResult, error) {
	if batch <= 0 {
		batch = 1000
	}
	ps := l.policies.Load()
	var res PurgeResult
	named := make([]string, 0, len(ps.BySource))
	for name, p := range ps.BySource {
		named = append(named, name)
		if err := l.purgeSet(ctx, []string{name}, false, p, batch, &res); err != nil {
			return res, err
		}
	}
	if err := l.purgeSet(ctx, named, true, ps.Default, batch, &res); err != nil {
		return res, err
	}
	n, err := l.purgeNonces(ctx, batch)
	res.NoncesPurged = n
	return res, err
}

// purgeSet purges the records of sources (or of every source not in
// sources, when exclude) under policy p: keys first (what is deleted
// needs no payload purge), then payloads, then late conflict bodies.
func (l *Ledger) purgeSet(ctx context.Context, sources []string, exclude bool, p Policy, batch int, res *PurgeResult) error {
	for _, step := range []struct {
		run       func(context.Context, dbsqlc.DBTX, dbsqlc.PurgeKeysParams) (int64, error)
		retention time.Duration
		count     *int
	}{
		{queries.PurgeKeys, p.KeyRetention, &res.KeysDeleted},
		{func(ctx context.Context, q dbsqlc.DBTX, arg dbsqlc.PurgeKeysParams) (int64, error) {
			return queries.PurgePayloads(ctx, q, dbsqlc.PurgePayloadsParams(arg))
		}, p.Retention, &res.PayloadsPurged},
		{func(ctx context.Context, q dbsqlc.DBTX, arg dbsqlc.PurgeKeysParams) (int64, error) {
			return queries.PurgeConflicts(ctx, q, dbsqlc.PurgeConflictsParams(arg))
		}, p.Retention, &res.ConflictsPurged},
	} {
		for {
			n, err := step.run(ctx, l.pool, dbsqlc.PurgeKeysParams{Sources: sources, Exclude: exclude,
				RetentionSeconds: step.retention.Seconds(), MaxRows: int32(batch)})
			if err != nil {
				return db.Error(err)
			}
			*step.count += int(n)
			if n < int64(batch) {
				break
			}
		}
	}
	return nil
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
		var n int64
		err := db.Retry(ctx, func() (err error) {
			n, err = queries.SweepExpiredLeases(ctx, l.pool, int32(batch))
			return err
		})
		if err != nil {
			return total, db.Error(err)
		}
		total += int(n)
		if n < int64(batch) {
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
	// OldestDispatchPending is the age of the oldest inbox event whose
	// dispatch is pending (not yet answered 2xx, and with require_claim
	// not yet claimed); 0 when none.
	OldestDispatchPending time.Duration
}

// Stats counts open records across all tenants.
func (l *Ledger) Stats(ctx context.Context) (Stats, error) {
	r, err := queries.LedgerStats(ctx, l.pool)
	if err != nil {
		return Stats{}, db.Error(err)
	}
	return Stats{Unknown: r.Unknown, DeadLettered: r.DeadLettered, Processing: r.Processing,
		RetryableFailed: r.RetryableFailed, Received: r.Received,
		OldestProcessing:      time.Duration(r.OldestProcessingSeconds * float64(time.Second)),
		OldestReceived:        time.Duration(r.OldestReceivedSeconds * float64(time.Second)),
		DispatchPending:       r.DispatchPending,
		DispatchDeadLettered:  r.DispatchDeadLettered,
		OldestDispatchPending: time.Duration(r.OldestPendingDispatchSeconds * float64(time.Second)),
	}, nil
}

func checkTokenArgs(id, token string) error {
	if _, err := uuid.Parse(id); err != nil {
		return apperr.New(apperr.NotFound, "no such claim")
	}
	if token == "" {
		return apperr.Field("claim_token", "is required")
	}
	if _, err := uuid.Parse(token); err != nil {
		return apperr.Field("claim_token", "is not a claim token")
	}
	return nil
}

// failedAs reports whether cur is as a Fail with token, kind and msg left
// it: the token still current (no claim won since), the error stored, and
// the state the kind leads to.
func failedAs(cur Record, token string, kind FailKind, msg string) bool {
	if cur.token != token || cur.LastError != msg {
		return false
	}
	switch kind {
	case Retryable:
		return cur.State == StateRetryableFailed || cur.State == StateDeadLettered
	case Permanent:
		return cur.State == StateDeadLettered
	case UnknownOutcome:
		return cur.State == StateUnknown
	}
	return false
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
		"lease lost: this claim token is no longer current; the claim is %s at attempt %d "+
			"(another holder reclaimed it, or its lease expired or an operator released it to unknown). "+
			"Do not fail or extend it; if the side effect happened, Complete with this token is still kept "+
			"while the claim is unknown.", cur.State, cur.Attempt)}
}

// writeRow runs write, one statement that returns a record (a
// token-guarded or conditional update), on a connection of the pool,
// again while it fails db.RetryableTx. pgx.ErrNoRows (the guard matched
// no row) is returned as it is.
func (l *Ledger) writeRow(ctx context.Context, write func(dbsqlc.DBTX) (dbsqlc.RecordRow, error)) (Record, error) {
	var row dbsqlc.RecordRow
	err := db.Retry(ctx, func() error {
		return db.OnPoolConn(ctx, l.pool, func(c *pgxpool.Conn) (err error) {
			row, err = write(c)
			return err
		})
	})
	if err != nil {
		return Record{}, err
	}
	return recordOf(row), nil
}

// queries are the ledger's statements (sidecar/db/queries/claim.sql).
var queries = dbsqlc.New()

// recordOf is the Record of row. Every statement that returns a record
// selects the columns of dbsqlc.RecordRow, so its row converts to one.
func recordOf(row dbsqlc.RecordRow) Record {
	r := Record{ID: row.ID, Tenant: row.Tenant, Key: Key{Source: row.Source, EventID: row.EventID, Action: row.Action},
		EventType: row.EventType, State: State(row.State), LastOutcome: Outcome(row.LastOutcome),
		Attempt: int(row.Attempt), MaxAttempts: int(row.MaxAttempts), LeasePolicy: LeasePolicy(row.LeasePolicy),
		LeaseUntil: row.LeaseUntil, NextAttemptAt: row.NextAttemptAt, PayloadHash: row.PayloadHash,
		ResultRef: row.ResultRef, LastError: row.LastError, ObjectID: row.ObjectID, ObjectVersion: row.ObjectVersion,
		ConflictCount: int(row.ConflictCount), CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		ClaimedAt: row.ClaimedAt, CompletedAt: row.CompletedAt, ReceiptHash: row.ReceiptHash, Origin: row.Origin,
		Reconciler: row.Reconciler}
	if row.ClaimToken != nil {
		r.token = *row.ClaimToken
	}
	r.IdempotencyKey = IdempotencyKey(r.Tenant, r.Key)
	return r
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// claimedOf is the Record of a row of ClaimOne or ClaimMany: the record
// columns and the cause logged with the decision ("" for none).
func claimedOf(row dbsqlc.ClaimOneRow) Record {
	rec := recordOf(dbsqlc.RecordRow{ID: row.ID, Tenant: row.Tenant, Source: row.Source, EventID: row.EventID,
		Action: row.Action, EventType: row.EventType, State: row.State, LastOutcome: row.LastOutcome,
		Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, LeasePolicy: row.LeasePolicy, LeaseUntil: row.LeaseUntil,
		NextAttemptAt: row.NextAttemptAt, PayloadHash: row.PayloadHash, ResultRef: row.ResultRef,
		LastError: row.LastError, ObjectID: row.ObjectID, ObjectVersion: row.ObjectVersion,
		ConflictCount: row.ConflictCount, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		ClaimedAt: row.ClaimedAt, CompletedAt: row.CompletedAt, ClaimToken: row.ClaimToken,
		ReceiptHash: row.ReceiptHash, Origin: row.Origin, Reconciler: row.Reconciler})
	rec.cause = Cause(row.Cause)
	return rec
}

// Page sizes of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 500
)

// OpenStates are the states List accepts without an execution id: records
// an operator or a retry may still act on.
var OpenStates = []State{StateReceived, StateProcessing, StateRetryableFailed, StateDeadLettered, StateUnknown}

// States lists every record state (List accepts any of them with an
// execution id).
var States = []State{StateReceived, StateProcessing, StateCompleted, StateRetryableFailed, StateDeadLettered,
	StateUnknown, StateStale}

// ListFilter selects the records of List.
type ListFilter struct {
	// State is required without ExecutionID, and then one of OpenStates.
	// With ExecutionID it is optional ("" for any) and may be any of
	// States.
	State State
	// ExecutionID, when not empty, keeps only the records whose current
	// attempt was won by a claim that carried this execution id
	// (Request.ExecutionID): the records that execution holds or held
	// last, in whatever state they are now (how a record is tied to an
	// execution: see Ledger.FailExecution). At most MaxExecIDLen bytes.
	ExecutionID string
	// Source, when not empty, keeps only the records of that source.
	Source string
	// Limit is the page size, 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the next cursor of the previous page; empty for the first.
	Cursor string
}

// List returns one page of tenant's records, oldest first by (updated_at,
// id), without delivery logs, and the cursor of the next page: empty when
// there is no more. Without f.ExecutionID they are the records in state
// f.State; with it, the records whose current attempt was won by that
// execution, in state f.State when it is set. The cursor is
// opaque to callers (it is the base64url, unpadded, of the last record's
// updated_at in RFC 3339 with nanoseconds, "|", and its id). A record that
// changes while a caller pages moves to the end (or out of the list) and may
// be seen again or not at all.
// Errors: Invalid naming state, execution_id, source, limit or cursor;
// Unavailable.
func (l *Ledger) List(ctx context.Context, tenant string, f ListFilter) ([]Record, string, error) {
	if tenant == "" {
		return nil, "", apperr.New(apperr.Unauthorized, "no tenant")
	}
	if err := checkListFilter(f); err != nil {
		return nil, "", err
	}
	limit, after, afterID, err := pageStart(f.Limit, f.Cursor, "is not a next_cursor of this list")
	if err != nil {
		return nil, "", err
	}
	var rows []dbsqlc.RecordRow
	if f.ExecutionID != "" {
		var got []dbsqlc.ListByExecutionRow
		got, err = queries.ListByExecution(ctx, l.pool, dbsqlc.ListByExecutionParams{Tenant: tenant,
			ExecutionID: f.ExecutionID, State: nullable(string(f.State)), Source: nullable(f.Source),
			AfterAt: after, AfterID: afterID, MaxRows: int32(limit + 1)})
		rows = make([]dbsqlc.RecordRow, len(got))
		for i, r := range got {
			rows[i] = dbsqlc.RecordRow(r)
		}
	} else {
		var got []dbsqlc.ListOpenRow
		got, err = queries.ListOpen(ctx, l.pool, dbsqlc.ListOpenParams{Tenant: tenant, State: string(f.State),
			Source: nullable(f.Source), AfterAt: after, AfterID: afterID, MaxRows: int32(limit + 1)})
		rows = make([]dbsqlc.RecordRow, len(got))
		for i, r := range got {
			rows[i] = dbsqlc.RecordRow(r)
		}
	}
	if err != nil {
		return nil, "", db.Error(err)
	}
	recs := make([]Record, len(rows))
	for i, r := range rows {
		recs[i] = recordOf(r)
	}
	return page(recs, limit, func(r Record) time.Time { return r.UpdatedAt })
}

// pageStart reads a keyset page's limit (0: DefaultListLimit) and cursor
// (""; else the position after which the page starts, or an Invalid error
// naming cursor with badCursor).
func pageStart(limit int, cursor, badCursor string) (int, *time.Time, *string, error) {
	if limit == 0 {
		limit = DefaultListLimit
	}
	if cursor == "" {
		return limit, nil, nil, nil
	}
	at, id, ok := decodeCursor(cursor)
	if !ok {
		return 0, nil, nil, apperr.Field("cursor", "%s", badCursor)
	}
	return limit, &at, &id, nil
}

// page is recs, a keyset page queried with limit+1 rows, as at most limit
// records and the cursor of the next page ("" on the last), positioned at
// the last record's at and id.
func page(recs []Record, limit int, at func(Record) time.Time) ([]Record, string, error) {
	if len(recs) <= limit {
		return recs, "", nil
	}
	recs = recs[:limit]
	last := recs[limit-1]
	return recs, encodeCursor(at(last), last.ID), nil
}

// checkListFilter returns an Invalid error naming the first bad field of f.
func checkListFilter(f ListFilter) error {
	if f.ExecutionID != "" {
		if err := checkExecutionID(f.ExecutionID); err != nil {
			return err
		}
		if f.State != "" && !slices.Contains(States, f.State) {
			return apperr.Field("state", "must be one of received, processing, completed, retryable_failed, "+
				"dead_lettered, unknown, stale")
		}
	} else {
		switch {
		case f.State == "":
			return apperr.Field("state", "is required (unless execution_id is given)")
		case !slices.Contains(OpenStates, f.State):
			return apperr.Field("state", "must be one of received, processing, retryable_failed, dead_lettered, unknown "+
				"(any state with execution_id)")
		}
	}
	if err := checkSource(f.Source); err != nil {
		return err
	}
	if f.Limit < 0 || f.Limit > MaxListLimit {
		return apperr.Field("limit", "must be from 1 to %d", MaxListLimit)
	}
	return nil
}

// checkSource returns an Invalid error naming source when s is not empty
// and not a valid source name.
func checkSource(s string) error {
	switch {
	case len(s) > MaxSourceLen:
		return apperr.Field("source", "must be at most %d bytes", MaxSourceLen)
	case s != "" && !sourceRe.MatchString(s):
		return apperr.Field("source", "must start with a letter or digit and contain only letters, digits and . _ : / -")
	}
	return nil
}

// checkExecutionID returns an Invalid error naming execution_id unless id
// is a non-empty execution id of at most MaxExecIDLen bytes that
// PostgreSQL text can hold.
func checkExecutionID(id string) error {
	switch {
	case id == "":
		return apperr.Field("execution_id", "is required")
	case len(id) > MaxExecIDLen:
		return apperr.Field("execution_id", "must be at most %d bytes", MaxExecIDLen)
	}
	return textFields(map[string]string{"execution_id": id})
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
