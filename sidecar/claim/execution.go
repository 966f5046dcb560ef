package claim

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Claims of an execution.
//
// A claim may carry the caller's execution id (Request.ExecutionID: the n8n
// execution that claims). A record is tied to the execution whose claim
// won its CURRENT attempt: List with ListFilter.ExecutionID finds those
// records, and FailExecution fails the ones still processing, for an n8n
// Error Trigger workflow that cleans up after an execution that crashed
// between Claim and Complete.
//
// Storage. The execution id is already kept in every claim's delivery-log
// entry, and the entry of a win ('won') records the attempt it won. Each
// win adds one to the record's attempt, so a record has at most one 'won'
// entry per attempt (a replay of the winning request is logged
// 'won_replayed'), and the 'won' entry whose attempt equals the record's
// attempt names the execution that won the current attempt. Those entries
// are found through a partial index on claim_deliveries (execution_id,
// claim_id, attempt) WHERE outcome = 'won' (migration 00008). This was
// chosen over a column on claims set by each win: the claim statement stays
// exactly as it was, and the cost on the claim path is one index entry per
// win in an insert-only table, where an indexed claims column would add an
// entry to every new version of a claims row (win, complete, fail) and
// rewrite the claim statement. A later win by another execution (or by a
// claim without an execution id) unties the record from the first
// execution; transitions that are not wins (complete, fail, an expired
// lease moved to unknown, resolve) keep the tie. The payload purge removes
// a terminal record's delivery log after the payload retention, and with
// it the tie; processing records are never purged.
//
// Execution ids are unique per n8n instance only: two n8n instances that
// share an API key (a tenant) may reuse each other's ids, and one could
// fail the other's claims. Give each n8n instance its own API key.

// MaxExecutionFail is the most records one FailExecution fails; the rest
// are left for the next call (ExecutionFailed.More).
const MaxExecutionFail = 1000

// ExecutionFailure is what FailExecution takes.
type ExecutionFailure struct {
	// ExecutionID is the execution whose claims fail: required, at most
	// MaxExecIDLen bytes.
	ExecutionID string
	// Source, when not empty, narrows to the records of that source.
	Source string
	// Kind is Retryable, Permanent or UnknownOutcome, as for Fail.
	Kind FailKind
	// Error is stored as each record's last_error (not logged), cut to
	// MaxErrorLen bytes, as for Fail.
	Error string
}

// ExecutionFailed is the answer of FailExecution.
type ExecutionFailed struct {
	// Records are the records this call failed, as they are after the
	// fail, ordered by id; empty when the execution held none.
	Records []Record
	// More reports that the execution held more than MaxExecutionFail
	// processing records when the call began: call again for the rest.
	More bool
}

// FailExecution fails, as Fail would with each one's current token, every
// record of tenant in state processing whose current attempt was won by a
// claim that carried f.ExecutionID (Request.ExecutionID), at most
// MaxExecutionFail of them, in one transaction. A record is tied to the
// execution whose claim won its current attempt, through that win's
// delivery-log entry (storage: the comment "Claims of an execution" in
// this file); a later win by another claim unties it. Execution ids are
// unique per n8n instance only, so each n8n instance should use its own
// API key (tenant). Each record moves
// exactly as a Fail of its current token moves it (same statement: backoff
// with full jitter or dead_lettered for Retryable, dead_lettered for
// Permanent, unknown for UnknownOutcome), its delivery-log entry
// ('failed_<kind>') carries the execution id, and claims waiting on it are
// woken. The fence is the claim token: a record won since by another
// execution (or completed, failed, expired and moved to unknown) is not
// touched, even when that happens while this call runs. Calling again is
// safe: the records already failed are no longer processing, so a second
// call answers the rest, or none.
// Errors: Invalid naming execution_id, source or retry; Unavailable;
// otherwise internal. On an error no record was failed, unless the
// connection was lost under the commit (db.OutcomeUnknown): then they may
// have been, and calling again answers the ones still held.
func (l *Ledger) FailExecution(ctx context.Context, tenant string, f ExecutionFailure) (ExecutionFailed, error) {
	if tenant == "" {
		return ExecutionFailed{}, apperr.New(apperr.Unauthorized, "no tenant")
	}
	if err := checkExecutionID(f.ExecutionID); err != nil {
		return ExecutionFailed{}, err
	}
	if err := checkSource(f.Source); err != nil {
		return ExecutionFailed{}, err
	}
	switch f.Kind {
	case Retryable, Permanent, UnknownOutcome:
	default:
		return ExecutionFailed{}, apperr.Field("retry", "must be one of retryable, permanent, unknown")
	}
	msg := failText(f.Error)
	var out ExecutionFailed
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		out = ExecutionFailed{}
		all, err := queries.ExecutionHeld(ctx, tx, dbsqlc.ExecutionHeldParams{Tenant: tenant,
			ExecutionID: f.ExecutionID, Source: nullable(f.Source), MaxRows: MaxExecutionFail + 1})
		if err != nil {
			return err
		}
		if len(all) > MaxExecutionFail {
			all, out.More = all[:MaxExecutionFail], true
		}
		if len(all) == 0 {
			return nil
		}
		b := &pgx.Batch{}
		queue := db.Queue(b)
		for _, h := range all {
			_, _ = queries.Fail(ctx, queue, dbsqlc.FailParams{ID: h.ID, Tenant: tenant, Token: h.ClaimToken,
				Kind: string(f.Kind), Error: msg, Jitter: l.jitter(), ExecutionID: &f.ExecutionID})
		}
		results := db.Results(tx.SendBatch(ctx, b))
		for range all {
			row, err := queries.Fail(ctx, results, dbsqlc.FailParams{})
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// Settled or won again since the candidates were read: the
				// token guard leaves it alone.
			case err != nil:
				results.Close()
				return err
			default:
				out.Records = append(out.Records, recordOf(dbsqlc.RecordRow(row)))
			}
		}
		return results.Close()
	})
	if err != nil {
		return ExecutionFailed{}, db.Error(err)
	}
	for _, rec := range out.Records {
		l.obs.Failed(rec.Source, f.Kind)
	}
	return out, nil
}
