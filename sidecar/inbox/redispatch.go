package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

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
	source, err := queries.Redispatch(ctx, tx, dbsqlc.RedispatchParams{ClaimID: claimID, Tenant: tenant, Detail: RedispatchDetail})
	if errors.Is(err, pgx.ErrNoRows) {
		return queries.RearmPending(ctx, tx, dbsqlc.RearmPendingParams{ClaimID: claimID, Tenant: tenant})
	}
	if err != nil {
		return err
	}
	if _, err := in.river.InsertTx(ctx, tx, DispatchArgs{ClaimID: claimID, Source: source},
		&river.InsertOpts{Queue: sources.QueueName(source), MaxAttempts: riverMaxAttempts}); err != nil {
		return fmt.Errorf("enqueue dispatch: %w", err)
	}
	return nil
}
