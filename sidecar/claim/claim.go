// Package claim is the claim ledger: the inbox and action ledger of
// Idempotent Claim over PostgreSQL.
//
// A claim record is identified by its idempotency key (tenant, source,
// event_id, action). Whether a caller won the right to run the protected
// side effect is decided by ONE SQL statement, an INSERT … ON CONFLICT … DO
// UPDATE arbitrated by the unique index on the key; the row lock taken by
// that statement serialises concurrent claims of one key across any number
// of sidecar replicas. Every winning claim gets a fresh claim token (a
// fencing token); Complete, Fail and Extend must present the current token,
// so a holder whose lease was reclaimed cannot overwrite the newer holder's
// result.
//
// States: received → processing → completed | retryable_failed |
// dead_lettered | unknown, plus stale for out-of-order events. See
// DESIGN.md in the project documentation for the full state machine.
package claim

import (
	"time"
)

// Outcome is the answer to a claim attempt. Duplicates are outcomes, not
// errors.
type Outcome string

// Claim outcomes.
const (
	// Won: the caller holds the lease and must run the protected effect,
	// then Complete or Fail with the returned claim token.
	Won Outcome = "won"
	// Duplicate: the effect already completed; ResultRef holds its reference.
	Duplicate Outcome = "duplicate"
	// InProgress: another holder's lease is still valid.
	InProgress Outcome = "in_progress"
	// RetryLater: a previous attempt failed retryably and its next attempt is
	// not yet due (see NextAttemptAt).
	RetryLater Outcome = "retry_later"
	// Conflict: the key is known with a different payload hash. The record is
	// not changed; the conflict is logged and counted.
	Conflict Outcome = "conflict"
	// Stale: the claim's object version is not newer than the last completed
	// version of the same object.
	Stale Outcome = "stale"
	// DeadLettered: the record is dead-lettered (permanent failure or attempt
	// cap); an operator must resolve it.
	DeadLettered Outcome = "dead_lettered"
	// Unknown: the outcome of an earlier attempt is unknown (timeout, or an
	// expired lease under policy review); an operator must resolve it.
	Unknown Outcome = "unknown"
)

// Outcomes lists every claim outcome.
var Outcomes = []Outcome{Won, Duplicate, InProgress, RetryLater, Conflict, Stale, DeadLettered, Unknown}

// State is the persisted state of a claim record.
type State string

// Record states.
const (
	StateReceived        State = "received"
	StateProcessing      State = "processing"
	StateCompleted       State = "completed"
	StateRetryableFailed State = "retryable_failed"
	StateDeadLettered    State = "dead_lettered"
	StateUnknown         State = "unknown"
	StateStale           State = "stale"
)

// FailKind classifies a failed attempt.
type FailKind string

// Fail kinds.
const (
	// Retryable: transient failure; the record is retried after a backoff, or
	// dead-lettered once the attempt cap is reached.
	Retryable FailKind = "retryable"
	// Permanent: validation or permission failure; dead-lettered at once.
	Permanent FailKind = "permanent"
	// UnknownOutcome: the effect may or may not have happened (e.g. a
	// timeout); moved to unknown and never retried automatically.
	UnknownOutcome FailKind = "unknown"
)

// ResolveOutcome is an operator's decision on an unknown or dead-lettered
// record.
type ResolveOutcome string

// Resolve outcomes.
const (
	// ResolveCompleted: the effect did happen; the record becomes completed.
	ResolveCompleted ResolveOutcome = "completed"
	// ResolveRetry: the effect did not happen; the record becomes claimable
	// again at once, with one more attempt allowed.
	ResolveRetry ResolveOutcome = "retry"
	// ResolveFailed: the effect did not happen and must not be tried again;
	// an unknown record becomes dead_lettered (a dead-lettered one already
	// is, so it cannot be resolved this way).
	ResolveFailed ResolveOutcome = "failed"
)

// Key identifies a claim record within a tenant.
type Key struct {
	Source  string
	EventID string
	// Action is "" for the event-level claim, or the action-ledger name
	// ("create-invoice") for a claim of one effect of the event.
	Action string
}

// Request is one claim attempt. Tenant comes from the authenticated API key,
// never from the request body.
type Request struct {
	Tenant string
	Key
	EventType string
	// PayloadHash is the lowercase hex SHA-256 of the RFC 8785 canonical JSON
	// of the payload (see PayloadHash), or "" to skip conflict detection.
	PayloadHash string
	// Lease is the lease length; 0 takes the source policy's default.
	Lease time.Duration
	// ObjectID and ObjectVersion enable out-of-order protection: a claim
	// whose version is not newer than the last completed version of the
	// object is Stale. Both or neither.
	ObjectID      string
	ObjectVersion *int64
	// LeasePolicy is what an expiry of the lease this claim wins means:
	// Reclaim or Review; "" takes the source policy's (Policy.LeasePolicy,
	// default Review). It is stored on the record when the claim wins (a
	// new record, or a new attempt: retryable_failed past its backoff,
	// received, an expired lease under Reclaim) and governs that attempt's
	// lease; any other outcome leaves the record's policy as it is. Any
	// other value is Invalid naming lease_policy.
	LeasePolicy LeasePolicy
	// ExecutionID is the caller's execution id (n8n), at most MaxExecIDLen
	// bytes, "" for none. It is kept in the delivery log, and the
	// delivery-log entry of a win ties the attempt it won to the execution:
	// see ListFilter.ExecutionID and Ledger.FailExecution.
	ExecutionID string
	// RequestID identifies this claim request to its caller, so that the
	// caller may send it again when the answer was lost (at most
	// MaxRequestIDLen bytes; "" for none). While the claim it won holds a
	// valid lease, the same request again is answered Won with the same
	// token and attempt (logged as DeliveryWonReplayed); any other request
	// is decided as usual. It must differ between requests that must not
	// share a claim (two items of one execution with one key), and must not
	// change when the same request is retried. Not part of the key.
	RequestID string
	// Door is the source name (ingest door or trigger source) a provider
	// delivery came through, "" for a workflow's claim. Two doors of one
	// dedupe_scope share records; the door tells them apart in the
	// delivery log (Delivery.Door) and explains a copy from the other
	// door (CauseAnotherDoor). Not part of the key.
	Door string
	// Fingerprint is the SHA-256 of the provider request the event came
	// in (sources.Event sets it; 32 bytes, nil for none): equal for the
	// very same request bytes, different for a provider retry signed
	// again. Kept in the delivery log; never a secret.
	Fingerprint []byte
	// RetrySignal is what the provider's retry headers say about this
	// delivery ("square-retry-number: 3; square-retry-reason: timeout"),
	// "" when it sends none (verify.Provider.RetryHeaders).
	RetrySignal string
	// ExecutionMode is the claiming n8n execution's mode (n8n's
	// getMode(): "webhook", "trigger", "retry", "manual", …), "" when
	// unknown; at most MaxExecutionModeLen bytes. A claim made in "retry"
	// or "manual" mode that finds the key done is an operator's replay
	// (CauseOperatorReplay).
	ExecutionMode string
	// Shadow asks for an observed, not enforced, decision (shadow mode):
	// the claim is decided by the same statement on the same record as
	// any other, its delivery-log entry is marked shadow, and the answer
	// is Won whatever the decision was, with Result.WouldBe the decision
	// and a claim token only when it is Won. A claim of a source whose
	// policy is in shadow (Policy.Shadow) is a shadow claim whatever this
	// says. Not part of the key.
	Shadow bool
	// WorkflowID is the claiming workflow's id (n8n: the workflow's id,
	// shared by every version of it), "" when unknown; WorkflowVersion
	// is the version of it that runs (n8n: a workflow history version
	// id), "" when unknown. n8n gives a node no version id, so the
	// Idempotent Claim node sends WorkflowID alone. Each at most
	// MaxWorkflowFieldLen bytes of printable ASCII. Kept in the delivery
	// log; two executions that ran two known, different versions of one
	// workflow are CauseN8nTwoVersions. Not part of the key.
	WorkflowID      string
	WorkflowVersion string
	// Reconciler names the reconciler (a key of Policies.Reconcilers)
	// claimd calls if the attempt this claim wins ends unknown; "" takes
	// the source's (Policy.Reconciler) at that time. Stored on the record
	// when the claim wins, as LeasePolicy is. A name that is not
	// configured is Invalid naming reconciler. Never a URL: a reconciler
	// is configured, not sent.
	Reconciler string
}

// MaxExecutionModeLen is the longest Request.ExecutionMode, in bytes.
const MaxExecutionModeLen = 64

// MaxWorkflowFieldLen is the longest Request.WorkflowID and
// Request.WorkflowVersion, in bytes (n8n's are 16-character ids and
// 36-character UUIDs).
const MaxWorkflowFieldLen = 128

// Cause is why a duplicate copy of an event came: the delivery log's
// explanation of each duplicate (and in_progress) entry, decided by the
// statement that writes the entry (the duplicate_cause function of
// migrations 00014, 00020 and 00026).
type Cause string

// Duplicate causes, in the order they are tested.
const (
	// CauseOperatorReplay: an operator replayed the dispatch, resolved or
	// released the record before this copy, or the claiming n8n
	// execution ran in retry or manual mode. Nothing to fix: the layer
	// kept the effect from running twice.
	CauseOperatorReplay Cause = "operator_replay"
	// CauseReconciled: a reconciler settled the record before this copy
	// (the last act on it was a reconciler's verdict: it found the effect
	// done, or not done and claimd ran the workflow again). Tested with
	// CauseOperatorReplay: the latest act, a reconciler's or an
	// operator's, explains the copy. Nothing to fix: the layer kept the
	// effect from running twice.
	CauseReconciled Cause = "reconciled"
	// CauseBackfill: the first real delivery of an event claimd had
	// already stored from the provider's own event list (backfill): it
	// arrived late, or it is the redelivery claimd asked for. Nothing to
	// fix; a late delivery says the door was unreachable for a while.
	CauseBackfill Cause = "backfill"
	// CauseAnotherDoor: another source of the same dedupe_scope (another
	// door) delivered this event first. Expected when a provider posts
	// to two endpoints; check the provider's webhook list otherwise.
	CauseAnotherDoor Cause = "another_door"
	// CauseProviderRetry: the provider sent the event again (its retry
	// header, a re-signed request, or the same bytes again). Usually the
	// provider did not get a 2xx in time: check the door's answer times.
	CauseProviderRetry Cause = "provider_retry"
	// CauseDispatchRetry: claimd's dispatcher posted the event to n8n
	// more than once (an attempt timed out or failed after n8n had
	// started it). Raise forward.timeout or answer the webhook sooner.
	CauseDispatchRetry Cause = "dispatch_retry"
	// CauseN8nTwice: two n8n executions ran one delivery (one dispatch,
	// or one trigger request): a resent webhook request inside n8n, two
	// workflows on one path. The note names both executions.
	CauseN8nTwice Cause = "n8n_twice"
	// CauseN8nTwoVersions: two n8n executions of two versions of one
	// workflow ran one delivery: two versions were active at once (after
	// the workflow was edited and published again, the old version's
	// trigger still ran). Told when both executions' workflow versions
	// are known and differ: named by their claims
	// (Request.WorkflowVersion), or told later by
	// Ledger.RecordExecutionWorkflow (n8n's settle hook), which revises a
	// copy first explained CauseN8nTwice or CauseUpstreamRepeat; the
	// note names both executions and both versions. Deactivate and
	// activate the workflow again, or restart the n8n process that runs
	// the old trigger.
	CauseN8nTwoVersions Cause = "n8n_two_versions"
	// CauseUpstreamRepeat: the workflow claimed the key again and claimd
	// did not deliver it: whatever starts the workflow (n8n's own
	// webhook retried by a provider, a schedule reading the same rows)
	// repeated it.
	CauseUpstreamRepeat Cause = "upstream_repeat"
)

// Causes lists every duplicate cause.
var Causes = []Cause{CauseOperatorReplay, CauseReconciled, CauseBackfill, CauseAnotherDoor, CauseProviderRetry, CauseDispatchRetry,
	CauseN8nTwice, CauseN8nTwoVersions, CauseUpstreamRepeat}

// Explain is the cause in plain words for people (the console's record
// page); "" for "" and for a cause this version does not know.
func (c Cause) Explain() string {
	switch c {
	case CauseOperatorReplay:
		return "an operator replayed, resolved or released it, or someone retried the n8n execution or ran the workflow by hand"
	case CauseReconciled:
		return "a reconciler settled it before (it found the effect done, or not done and claimd ran the workflow again)"
	case CauseBackfill:
		return "the provider's real delivery arrived after claimd had already backfilled the event from the provider's event list"
	case CauseAnotherDoor:
		return "another source sharing this dedupe scope delivered it first"
	case CauseProviderRetry:
		return "the provider sent it again"
	case CauseDispatchRetry:
		return "claimd posted it to n8n more than once (an earlier attempt timed out or failed after n8n had started it)"
	case CauseN8nTwice:
		return "n8n ran one delivery in two executions"
	case CauseN8nTwoVersions:
		return "n8n ran one delivery in two executions of two versions of the workflow, active at once"
	case CauseUpstreamRepeat:
		return "the workflow claimed it again although claimd did not deliver it again"
	}
	return ""
}

// Result is the answer to a claim attempt.
type Result struct {
	Outcome Outcome
	// Token is the claim token; set only when Outcome is Won. A replay of
	// the winning request (same RequestID) gets the token it won.
	Token string
	// Cause is why this claim is a copy, for Duplicate and InProgress
	// (as logged with it), "" otherwise.
	Cause Cause
	// WouldBe is, for a shadow claim (Request.Shadow), the outcome the
	// ledger decided and would have answered (Outcome is then Won);
	// "" for any other claim.
	WouldBe Outcome
	Record
}

// Record is the stored state of one idempotency key.
type Record struct {
	ID             string
	IdempotencyKey string
	Tenant         string
	Key
	EventType     string
	State         State
	LastOutcome   Outcome
	Attempt       int
	MaxAttempts   int
	LeasePolicy   LeasePolicy
	LeaseUntil    *time.Time
	NextAttemptAt *time.Time
	// PayloadHash is the hash the claims of this key present (the
	// workflow's view), "" until a claim carried one. Claims are compared
	// with it.
	PayloadHash string
	// ReceiptHash is the provider payload's hash as ingest computed it
	// (the source's view), "" for keys that never came through ingest.
	// Provider redeliveries are compared with it.
	ReceiptHash string
	// Origin is "backfill" for an inbox record claimd made itself from
	// the provider's own list of events (a delivery that never arrived,
	// claims.origin), "" for every other record.
	Origin        string
	ResultRef     string
	LastError     string
	ObjectID      string
	ObjectVersion *int64
	ConflictCount int
	CreatedAt     time.Time
	UpdatedAt     time.Time
	ClaimedAt     *time.Time
	CompletedAt   *time.Time
	// Reconciler is the reconciler the claim that won the record's
	// current attempt named (Request.Reconciler), "" when it named none
	// (the source's default applies).
	Reconciler string
	// Deliveries is the delivery log, oldest first; filled only by Get and Find.
	Deliveries []Delivery

	token string // current claim token; never leaves the package
	cause Cause  // the cause a claim statement logged with this decision
}

// DeliveryWonReplayed is the delivery-log outcome of a replayed claim: the
// request that holds the lease (same RequestID) asked again, was answered
// Won with its claim token, and nothing else changed. The caller must run
// the effect once, then Complete or Fail with that token as usual.
const DeliveryWonReplayed = "won_replayed"

// Delivery is one entry of the delivery log: a claim attempt or a transition.
type Delivery struct {
	At          time.Time
	Outcome     string
	Attempt     int
	PayloadHash string
	ExecutionID string
	Detail      string
	// Actor is who wrote an operator's entry (resolve, release, replay):
	// the API key's prefix (auth.Principal.KeyPrefix), never the key; ""
	// for every other entry.
	Actor string
	// Door is the source name a provider delivery came through ("" for a
	// workflow's claim and for transitions).
	Door string
	// Cause is why a duplicate or in_progress entry's copy came, "" for
	// any other entry (and for entries logged before causes were).
	Cause Cause
	// CauseNote is the cause's evidence in plain words: the provider's
	// retry header, both doors, both execution ids, the number of
	// dispatch posts.
	CauseNote string
	// Shadow marks the entry of a shadow claim: the outcome is what
	// claimd decided and recorded, but the caller was answered won and
	// ran (Request.Shadow).
	Shadow bool
	// WorkflowID and WorkflowVersion are the claiming workflow's id and
	// version as the claim named them (Request.WorkflowID,
	// Request.WorkflowVersion), "" when it did not.
	WorkflowID      string
	WorkflowVersion string
}
