package claim

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Replay check of signed one-time values (verify.Result.Nonce).
//
// A provider that signs a one-time value but not the event (Mailgun signs
// timestamp + token, not event-data:
// https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks)
// lets whoever captured one delivery post any other body under its
// signature until the timestamp leaves the tolerance, and the key rule
// takes the forged body's new event id as a new event. Mailgun advises
// refusing a token seen before. A provider retry, though, may resend the
// very same request, token and all: refusing it would make the provider
// retry until it gives up, or lose the event. So a nonce is bound to the
// delivery it first came with (the SHA-256 of its events' ids and payload
// hashes, the same judgement of "the same event" the ledger makes): the
// same nonce with the same delivery goes on to the ledger's duplicate
// path; the same nonce with another delivery is a replay, refused as
// unauthenticated, and nothing of it is stored.

// ErrNonceReplayed is RecordNonceTx's answer to a nonce already recorded,
// not yet expired, with another delivery.
var ErrNonceReplayed = errors.New("claim: one-time value already used by another delivery")

// Nonce is one delivery's one-time value as the replay check keeps it:
// never the value itself (a credential), its SHA-256.
type Nonce struct {
	// Tenant and Scope are the source's tenant and dedupe scope: a nonce
	// is unique within them.
	Tenant, Scope string
	// Hash is the SHA-256 of the nonce's value.
	Hash []byte
	// Delivery is the SHA-256 of the delivery's events (DeliveryHash).
	Delivery []byte
	// TTL is how long the nonce is kept from now; at least one second is
	// kept.
	TTL time.Duration
}

// NewNonce is the Nonce of value, sent with the delivery of reqs (its
// events in body order) to a source of tenant and scope, kept for ttl.
func NewNonce(tenant, scope, value string, ttl time.Duration, reqs []Request) Nonce {
	h := sha256.Sum256([]byte(value))
	return Nonce{Tenant: tenant, Scope: scope, Hash: h[:], Delivery: DeliveryHash(reqs), TTL: ttl}
}

// DeliveryHash is the SHA-256 of the events of one delivery: each event's
// id and payload hash, joined unambiguously (the composite-key encoding),
// in order. Two deliveries have the same hash exactly when the ledger
// would find each event of one a duplicate of the other's.
func DeliveryHash(reqs []Request) []byte {
	h := sha256.New()
	for _, r := range reqs {
		h.Write([]byte(verify.JoinKey(r.EventID, r.PayloadHash)))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// RecordNoncesTx records ns in tx, in (tenant, scope, hash) order (so
// that transactions recording several lock them in one order; call it
// before the transaction's claims rows, as every caller does), one
// pipelined batch. It returns the indexes of ns (sorted) whose nonce is
// already bound to another delivery: nothing of those may be stored.
// Errors are the database's, unwrapped.
func RecordNoncesTx(ctx context.Context, tx pgx.Tx, ns []Nonce) ([]int, error) {
	order := make([]int, len(ns))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := ns[a], ns[b]
		if c := cmp.Compare(x.Tenant, y.Tenant); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Scope, y.Scope); c != 0 {
			return c
		}
		return bytes.Compare(x.Hash, y.Hash)
	})
	b := &pgx.Batch{}
	queue := db.Queue(b)
	for _, i := range order {
		n := ns[i]
		_, _ = queries.RecordNonce(ctx, queue, dbsqlc.RecordNonceParams{Tenant: n.Tenant, Scope: n.Scope,
			NonceHash: n.Hash, DeliveryHash: n.Delivery, TTLSeconds: max(n.TTL, time.Second).Seconds()})
	}
	results := db.Results(tx.SendBatch(ctx, b))
	var replayed []int
	for _, i := range order {
		same, err := queries.RecordNonce(ctx, results, dbsqlc.RecordNonceParams{})
		if err != nil {
			results.Close()
			return nil, err
		}
		if !same {
			replayed = append(replayed, i)
		}
	}
	if err := results.Close(); err != nil {
		return nil, err
	}
	slices.Sort(replayed)
	return replayed, nil
}

// RecordNonce records n in a transaction of its own (db.RunTx): nil when the
// nonce is new or bound to this same delivery, ErrNonceReplayed when it
// is bound to another, a db.Error otherwise. The trigger route calls it
// before it claims the delivery's events (in the claim's own transaction
// it would buy nothing: a nonce recorded whose claim then failed is bound
// to this delivery, whose retry passes, and any other body is refused as
// it must be).
func (l *Ledger) RecordNonce(ctx context.Context, n Nonce) error {
	var replayed []int
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		var err error
		replayed, err = RecordNoncesTx(ctx, tx, []Nonce{n})
		return err
	})
	if err != nil {
		return db.Error(err)
	}
	if len(replayed) > 0 {
		return ErrNonceReplayed
	}
	return nil
}

// purgeNonces deletes expired nonces in batches of at most batch rows
// until none is left or ctx ends, and returns how many it deleted.
func (l *Ledger) purgeNonces(ctx context.Context, batch int) (int, error) {
	total := 0
	for {
		n, err := queries.PurgeNonces(ctx, l.pool, int32(batch))
		if err != nil {
			return total, db.Error(err)
		}
		total += int(n)
		if n < int64(batch) {
			return total, nil
		}
	}
}
