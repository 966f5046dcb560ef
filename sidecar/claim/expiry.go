package claim

import (
	"slices"
	"time"
)

// Key expiry: when a record, and with it its key, may be forgotten.
//
// The retention purge (Ledger.Purge, the PurgeKeys statement) deletes a
// record in one of KeyPurgedStates once its last change (updated_at) is
// older than its source's key retention (Policy.KeyRetention, the default
// policy's for a source without its own). After that, a delivery or claim of
// the same key is a new event. KeyExpiry tells a caller when that may
// happen, from exactly what the purge uses; every answer that names the date
// (claims, lookups, settles, ingest receipts, the inbox, the console) takes
// it from here.

// Kinds of KeyExpiry, as the wire's key_expiry names them.
const (
	// ExpiryFixed: the record is terminal and the date is the purge's own
	// (updated_at + key retention): the key is kept until then and may be
	// deleted any time after.
	ExpiryFixed = "fixed"
	// ExpiryNotBefore: the record is open and never purged while open; its
	// retention clock starts when it settles, so the date is a lower bound.
	ExpiryNotBefore = "not_before"
)

// KeyPurgedStates are the states in which the retention purge deletes a
// record past its key retention (the PurgeKeys statement names the same
// states; a test holds them equal). Records in any other state are open and
// are never purged.
var KeyPurgedStates = []State{StateCompleted, StateDeadLettered, StateStale}

// KeyExpiry is when a record's key may be forgotten under the current
// policies.
type KeyExpiry struct {
	// At is the time in UTC, at microsecond precision: exact when Fixed,
	// a lower bound otherwise.
	At time.Time
	// Fixed is true for a terminal record (the purge may delete it any time
	// after At, never before), false for an open one.
	Fixed bool
}

// Kind is ExpiryFixed or ExpiryNotBefore.
func (e KeyExpiry) Kind() string {
	if e.Fixed {
		return ExpiryFixed
	}
	return ExpiryNotBefore
}

// KeyExpiry returns when r's key may be forgotten, from r's own
// timestamps and its source's key retention (the current policies'), so
// that every answer about the same record, on any route and at any time,
// names the same date: r.UpdatedAt plus the key retention, truncated to
// microseconds (the precision PostgreSQL keeps, as every timestamp in
// answers). For a record in one of KeyPurgedStates it is fixed: the purge
// deletes the record after that time, never before. For an open record it
// is a lower bound (not fixed): an open record is never purged, and its
// clock starts when it settles, which writes updated_at again no earlier
// than its last change; the date then moves to the settle time plus the
// key retention. A reload of the sources file that changes the key
// retention changes later answers (the purge follows the reloaded
// policies too); an operator's resolve of a dead-lettered record with
// retry reopens it.
func (l *Ledger) KeyExpiry(r Record) KeyExpiry {
	return l.KeyExpiryOf(r.Source, r.State, r.UpdatedAt)
}

// KeyExpiryOf is KeyExpiry for a record of source (the claims' source:
// an ingest source's dedupe scope) in state, last changed at updatedAt.
func (l *Ledger) KeyExpiryOf(source string, state State, updatedAt time.Time) KeyExpiry {
	at := updatedAt.Add(l.Policy(source).KeyRetention).Truncate(time.Microsecond).UTC()
	return KeyExpiry{At: at, Fixed: slices.Contains(KeyPurgedStates, state)}
}
