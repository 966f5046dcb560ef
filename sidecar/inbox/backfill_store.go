package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// HeaderOrigin is set on a backfilled event's dispatch: "backfill" says
// claimd took the event from the provider's own list, its delivery never
// arrived. A provider's header of that name is never stored
// (ForwardableHeaders), so only claimd sets it.
const HeaderOrigin = "X-Idempotency-Origin"

// Pool is the inbox's database pool (the backfill scanner keeps its scans
// and findings there).
func (in *Inbox) Pool() *pgxpool.Pool { return in.pool }

// Ledger is the inbox's claim ledger.
func (in *Inbox) Ledger() *claim.Ledger { return in.ledger }

// StoreBackfilled stores ev, an event IdentifyUnsigned made from the
// provider's copy, as an inbox record of origin backfill with its
// dispatch job, in ONE transaction with then (the caller's own rows, given
// the new record's id). headers are stored and forwarded with it, plus
// HeaderOrigin. It returns the record id and true, or "" and false when
// the key exists (its delivery arrived meanwhile: nothing is written and
// then is not called). detail is the delivery-log text. Errors as Store.
func (in *Inbox) StoreBackfilled(ctx context.Context, src *sources.Source, ev sources.Event, headers map[string]string, detail string,
	then func(tx pgx.Tx, claimID string) error) (string, bool, error) {
	if src.TriggerOnly() {
		return "", false, fmt.Errorf("source %q has no forward target: nothing to dispatch a backfilled event to", src.Name)
	}
	if err := in.ledger.Validate(ev.Request); err != nil {
		return "", false, err
	}
	h := make(map[string]string, len(headers)+1)
	for k, v := range headers {
		h[k] = v
	}
	h["x-idempotency-origin"] = "backfill"
	hdrJSON, err := json.Marshal(h)
	if err != nil {
		return "", false, err
	}
	var id string
	var stored bool
	err = db.RunTx(ctx, in.pool, func(tx pgx.Tx) error {
		var err error
		id, stored, err = in.ledger.ReceiveBackfilledTx(ctx, tx, ev.Request, detail)
		if err != nil || !stored {
			return err
		}
		if err := queries.InsertInboxEvent(ctx, tx, dbsqlc.InsertInboxEventParams{ClaimID: id, Tenant: src.Tenant,
			Source: src.Name, Body: ev.Payload, ContentType: ev.ContentType, Headers: hdrJSON}); err != nil {
			return err
		}
		if _, err := in.river.InsertTx(ctx, tx, DispatchArgs{ClaimID: id, Source: src.Name},
			&river.InsertOpts{Queue: sources.QueueName(src.Name), MaxAttempts: riverMaxAttempts}); err != nil {
			return fmt.Errorf("enqueue dispatch: %w", err)
		}
		if then != nil {
			return then(tx, id)
		}
		return nil
	})
	if err != nil {
		return "", false, storeError(err)
	}
	if stored {
		in.obs.Received(src.Name, Accepted)
	}
	return id, stored, nil
}

// Enqueue inserts a job of a kind registered through Options.Workers on
// River's default queue (worked by a replica with Dispatch). skipped
// reports that a unique job of the same kind and args was queued or
// running already (opts.UniqueOpts), so none was inserted. Errors: the
// database's (db.Error).
func (in *Inbox) Enqueue(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (id int64, skipped bool, err error) {
	res, err := in.river.Insert(ctx, args, opts)
	var unknown *river.UnknownJobKindError
	if errors.As(err, &unknown) {
		return 0, false, &apperr.Error{Code: apperr.Internal, Message: "no worker is registered for this job", Err: err}
	}
	if err != nil {
		return 0, false, db.Error(err)
	}
	return res.Job.ID, res.UniqueSkippedAsDuplicate, nil
}

// EnqueueTx is Enqueue within tx: the job is inserted, or found a
// duplicate (res.UniqueSkippedAsDuplicate, res.Job the job queued or
// running already), with whatever else tx writes, so both commit or
// neither. Errors as Enqueue's.
func (in *Inbox) EnqueueTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	res, err := in.river.InsertTx(ctx, tx, args, opts)
	var unknown *river.UnknownJobKindError
	if errors.As(err, &unknown) {
		return nil, &apperr.Error{Code: apperr.Internal, Message: "no worker is registered for this job", Err: err}
	}
	if err != nil {
		return nil, db.Error(err)
	}
	return res, nil
}

// Sources returns every configured verified source, ingest doors and
// trigger sources, sorted by name.
func (in *Inbox) Sources() []*sources.Source {
	c := in.cfg.Load()
	if c == nil {
		return nil
	}
	out := make([]*sources.Source, 0, len(c.Sources)+len(c.Triggers))
	for _, m := range []map[string]*sources.Source{c.Sources, c.Triggers} {
		for _, s := range m {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
