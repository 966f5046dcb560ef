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
// attempt in flight, armed_attempt the claim's attempt now (under
// require_claim a 2xx counts once a claim has won the record since:
// claimedSinceArmed), logged dispatch_replayed with detail $3. It returns
// the event's source; no row when the claim has no inbox event or its
// dispatch is pending (a dispatch job already runs for it: see
// rearmPendingSQL).
const redispatchSQL = `WITH e AS (UPDATE inbox_events ie SET dispatch_state = 'pending', dispatch_attempts = 0,
	last_dispatch_status = NULL, last_dispatch_error = NULL, dispatch_holder = NULL, dispatch_lease_until = NULL,
	armed_attempt = (SELECT c.attempt FROM claims c WHERE c.id = ie.claim_id)
	WHERE ie.claim_id = $1 AND ie.tenant = $2 AND ie.dispatch_state <> 'pending'
	RETURNING ie.claim_id, ie.source),
log AS (INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'dispatch_replayed', c.attempt, $3 FROM claims c JOIN e ON c.id = e.claim_id)
SELECT source FROM e`

// rearmPendingSQL marks the pending dispatch of inbox event $1 of tenant
// $2 as armed at the claim's attempt now: its job runs on, and under
// require_claim its next 2xx counts once a claim has won the record
// since (claimedSinceArmed), not for the win before the not_done.
const rearmPendingSQL = `UPDATE inbox_events ie SET armed_attempt = (SELECT c.attempt FROM claims c WHERE c.id = ie.claim_id)
	WHERE ie.claim_id = $1 AND ie.tenant = $2 AND ie.dispatch_state = 'pending'`

// RedispatchDetail is the delivery-log detail of a dispatch re-armed by a
// reconciler's not_done answer.
const RedispatchDetail = "dispatched again: the reconciler answered not_done (the effect did not happen)"

// RedispatchTx re-arms, in tx, the dispatch of the ingested event of
// claim claimID of tenant after a reconciler answered not_done (the claim
// became retryable_failed in the same transaction): its dispatch state
// returns to pending with a fresh attempt budget and a new dispatch job
// is queued, so claimd's own dispatch runs the workflow once more and it
// claims the record again. Under require_claim a 2xx of the re-armed
// dispatch counts once a claim has won the record since (a 2xx from an
// n8n that runs nothing is retried). A claim without an inbox event (a
// claim made by a workflow) is left as it is; one whose dispatch is
// pending keeps its job and attempts (it will find the record
// claimable) and is marked armed now all the same. A
// source no longer configured gets its job all the same: it waits for
// the source as any dispatch does. It is claim.Redispatch. Errors: the
// database's, River's insert.
func (in *Inbox) RedispatchTx(ctx context.Context, tx pgx.Tx, tenant, claimID string) error {
	var source string
	err := tx.QueryRow(ctx, redispatchSQL, claimID, tenant, RedispatchDetail).Scan(&source)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = tx.Exec(ctx, rearmPendingSQL, claimID, tenant)
		return err
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
