package ingest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// redispatchSQL re-arms the dispatch of inbox event $1 of tenant $2 that
// is not pending: pending again with a fresh attempt budget and no
// attempt in flight, logged dispatch_replayed with detail $3. It returns
// the event's source; no row when the claim has no inbox event or its
// dispatch is pending (a dispatch job already runs for it).
const redispatchSQL = `WITH e AS (UPDATE inbox_events SET dispatch_state = 'pending', dispatch_attempts = 0,
	last_dispatch_status = NULL, last_dispatch_error = NULL, dispatch_holder = NULL, dispatch_lease_until = NULL
	WHERE claim_id = $1 AND tenant = $2 AND dispatch_state <> 'pending'
	RETURNING claim_id, source),
log AS (INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'dispatch_replayed', c.attempt, $3 FROM claims c JOIN e ON c.id = e.claim_id)
SELECT source FROM e`

// RedispatchDetail is the delivery-log detail of a dispatch re-armed by a
// reconciler's not_done answer.
const RedispatchDetail = "dispatched again: the reconciler answered not_done (the effect did not happen)"

// RedispatchTx re-arms, in tx, the dispatch of the ingested event of
// claim claimID of tenant after a reconciler answered not_done (the claim
// became retryable_failed in the same transaction): its dispatch state
// returns to pending with a fresh attempt budget and a new dispatch job
// is queued, so claimd's own dispatch runs the workflow once more and it
// claims the record again. A claim without an inbox event (a claim made
// by a workflow) and one whose dispatch is pending (its dispatch job
// still runs and will find the record claimable) are left as they are. A
// source no longer configured gets its job all the same: it waits for
// the source as any dispatch does. It is claim.Redispatch. Errors: the
// database's, River's insert.
func (in *Inbox) RedispatchTx(ctx context.Context, tx pgx.Tx, tenant, claimID string) error {
	var source string
	err := tx.QueryRow(ctx, redispatchSQL, claimID, tenant, RedispatchDetail).Scan(&source)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := in.river.InsertTx(ctx, tx, DispatchArgs{ClaimID: claimID, Source: source},
		&river.InsertOpts{Queue: queueName(source), MaxAttempts: riverMaxAttempts}); err != nil {
		return fmt.Errorf("enqueue dispatch: %w", err)
	}
	return nil
}
