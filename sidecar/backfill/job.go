package backfill

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverqueue/river"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// ScanArgs is the River job that runs one scan of a source: the
// backfill_scans row ScanID, made queued with the job in one transaction
// (Enqueue). The job is not unique in River: the scan rows keep one scan
// of a source at a time (at most one queued or running row per tenant and
// source, a unique index), so a scan that finished frees its source at
// once, whenever River gets to completing its job.
type ScanArgs struct {
	Tenant  string `json:"tenant"`
	Source  string `json:"source"`
	Trigger string `json:"trigger"`
	Actor   string `json:"actor,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// ScanID is the backfill_scans row (result queued) made with the job:
	// the one row the job runs.
	ScanID int64 `json:"scan_id,omitempty"`
	// From and To are the range asked for (Trigger.From, To), nil for
	// the source's default.
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
}

// Kind implements river.JobArgs.
func (ScanArgs) Kind() string { return "claimd_backfill_scan" }

// InsertOpts are a scan job's: River's default queue, one attempt (the
// next scan is the retry). Not unique: see ScanArgs.
func InsertOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: river.QueueDefault, MaxAttempts: 1}
}

// Worker runs scan jobs with its Scanner.
type Worker struct {
	river.WorkerDefaults[ScanArgs]
	Scanner *Scanner
}

// Timeout lets a scan wait out its rate limits: the source's
// max_wait_seconds plus 10 minutes of work.
func (w *Worker) Timeout(job *river.Job[ScanArgs]) time.Duration {
	if src := w.Scanner.Inbox.TriggerSource(job.Args.Source); src != nil && src.Backfill != nil {
		return src.Backfill.MaxWait + 10*time.Minute
	}
	return 10 * time.Minute
}

// Work runs the scan of its queued row (ScanID) and nothing else: a job
// without a row, or whose row is no longer queued (ended by the stale-row
// sweep, or purged), does nothing. A source no longer configured (or no
// longer with backfill, or of another tenant now) is skipped, its queued
// row ended error.
func (w *Worker) Work(ctx context.Context, job *river.Job[ScanArgs]) error {
	a := job.Args
	if a.ScanID == 0 {
		w.Scanner.Log.Info().Str("source", a.Source).Msg("backfill scan job without a scan row: nothing to run")
		return nil
	}
	src := w.Scanner.Inbox.TriggerSource(a.Source)
	if src == nil || src.Tenant != a.Tenant || src.Backfill == nil {
		w.Scanner.Log.Info().Str("source", a.Source).Msg("backfill scan skipped: the source has no backfill now")
		msg := errNoBackfillNow
		if err := queries.EndQueuedScan(ctx, w.Scanner.Inbox.Pool(), dbsqlc.EndQueuedScanParams{ID: a.ScanID, Error: &msg,
			Result: ResultError, Queued: ResultQueued}); err != nil {
			return db.Error(err)
		}
		return nil
	}
	trig := Trigger{Kind: a.Trigger, Actor: a.Actor, Mode: sources.BackfillMode(a.Mode), ScanID: a.ScanID}
	if a.From != nil {
		trig.From = *a.From
	}
	if a.To != nil {
		trig.To = *a.To
	}
	_, err := w.Scanner.Run(ctx, src, trig)
	if errors.Is(err, ErrNotQueued) {
		w.Scanner.Log.Info().Str("source", a.Source).Int64("scan", a.ScanID).Msg("backfill scan job's row is no longer queued: nothing to run")
		return nil
	}
	return err
}

// Error texts of a queued scan that did not run, and of a running scan
// that will not finish.
const (
	errNoBackfillNow = "the scan did not run: the source has no backfill configuration now"
	errNeverRan      = "the scan never ran: its queue job is gone (a replica stopped, or the job was cancelled); ask for a new scan"
	errStopped       = "the scan stopped: claimd stopped or the job was lost"
)

// Enqueue asks for a scan of src: its backfill_scans row (result queued,
// requested_at now, started_at NULL, with trig's kind, actor, mode and
// range; a zero bound is stored NULL, the source's default) and its River
// job (ScanArgs with the row's id) are made in one transaction, so the
// caller has the scan's id at once and a queued row always has its job.
//
// One scan of a source at a time: when a scan of the source is queued or
// running already (its row; the unique index backfill_scans_one_active_idx),
// nothing is made and that scan is returned with already true — its own
// mode and range, not trig's, which are not applied. A scan that finished
// frees the source at once. Queued rows of the source whose job is gone,
// and running rows whose job no longer runs, are ended first
// (expireStale). trig.Mode must be a mode ModeFor allows ("" the
// source's). Errors: the database's (db.Error); Unavailable when the
// source's active scan kept ending while this one was asked for.
func Enqueue(ctx context.Context, in *inbox.Inbox, src *sources.Source, trig Trigger) (sc Scan, already bool, err error) {
	if src.Backfill == nil {
		return Scan{}, false, errors.New("the source has no backfill configuration")
	}
	mode, err := ModeFor(src, trig.Mode)
	if err != nil {
		return Scan{}, false, err
	}
	var from, to *time.Time
	// At PostgreSQL's precision, so that the row and the job say the same.
	if !trig.From.IsZero() {
		f := trig.From.UTC().Truncate(time.Microsecond)
		from = &f
	}
	if !trig.To.IsZero() {
		t := trig.To.UTC().Truncate(time.Microsecond)
		to = &t
	}
	var actor *string
	if trig.Actor != "" {
		actor = &trig.Actor
	}
	err = db.RunTx(ctx, in.Pool(), func(tx pgx.Tx) error {
		already = false
		if err := expireStale(ctx, tx, src.Tenant, src.Name); err != nil {
			return err
		}
		// The insert waits for a concurrent ask's transaction; when that
		// one made the source's active row, this one makes none and reads
		// it. Should that row end before it is read, the source is free
		// and the insert is tried again.
		for try := 0; try < 3; try++ {
			row, err := queries.QueueScan(ctx, tx, dbsqlc.QueueScanParams{Tenant: src.Tenant, Source: src.Name,
				Trigger: trig.Kind, Actor: actor, Mode: string(mode), Result: ResultQueued, RangeStart: from, RangeEnd: to})
			if err == nil {
				s := scanOf(dbsqlc.GetScanRow(row))
				if _, err := in.EnqueueTx(ctx, tx, ScanArgs{Tenant: src.Tenant, Source: src.Name, Trigger: trig.Kind,
					Actor: trig.Actor, Mode: string(mode), ScanID: s.ID, From: from, To: to}, InsertOpts()); err != nil {
					return err
				}
				sc = s
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			active, err := queries.ActiveScan(ctx, tx, dbsqlc.ActiveScanParams{Tenant: src.Tenant, Source: src.Name,
				Queued: ResultQueued, Running: ResultRunning})
			if err == nil {
				sc, already = scanOf(dbsqlc.GetScanRow(active)), true
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		return errActiveEnding
	})
	if errors.Is(err, errActiveEnding) {
		return Scan{}, false, &apperr.Error{Code: apperr.Unavailable,
			Message: "a scan of this source was ending while another was asked for: ask again"}
	}
	if err != nil {
		return Scan{}, false, db.Error(err)
	}
	return sc, already, nil
}

var errActiveEnding = errors.New("the source's active scan kept ending")

// expireStale ends the scans (of tenant's source; every source when
// tenant is "") that no River job will ever end, result error:
//
//   - a queued row whose job is no longer queued or running ("the scan
//     never ran"). A queued row is made in one transaction with its job,
//     so such a row's job was lost (cancelled, discarded after a crash of
//     its replica, or cleaned away);
//   - a running row whose job no longer runs ("the scan stopped"):
//     claimd was stopped or crashed mid-scan, and River has since rescued
//     or cleaned away the job (a job of a crashed replica stays running
//     until River's rescuer discards it, Worker.Timeout after it
//     started: the source's max_wait_seconds plus 10 minutes). A job runs
//     only the row its scan_id names (Worker.Work), so only that job
//     answers for a running row.
//
// Without it such a row would say queued or running for ever, and keep
// its source from being scanned (one queued or running row per source).
func expireStale(ctx context.Context, dbtx claim.DBTX, tenant, source string) error {
	_, err := dbtx.Exec(ctx, expireQueuedSQL, tenant, source, errNeverRan, ResultError, ResultQueued, ScanArgs{}.Kind())
	if err != nil {
		return db.Error(err)
	}
	_, err = dbtx.Exec(ctx, expireRunningSQL, tenant, source, errStopped, ResultError, ResultRunning, ScanArgs{}.Kind())
	if err != nil {
		return db.Error(err)
	}
	return nil
}

// Sources returns the configured sources with backfill, ingest doors and
// trigger sources.
func Sources(in *inbox.Inbox) []*sources.Source {
	var out []*sources.Source
	for _, s := range in.Sources() {
		if s.Backfill != nil {
			out = append(out, s)
		}
	}
	return out
}

// Schedule queues a scan of every source with a backfill interval whose
// next scan is due (backfill_state.next_scan_at ≤ now, or never
// scanned), for claimd's maintenance loop. It returns how many it queued.
func Schedule(ctx context.Context, in *inbox.Inbox, now time.Time) (int, error) {
	n := 0
	for _, src := range Sources(in) {
		if src.Backfill.Interval <= 0 {
			continue
		}
		due, err := queries.ScanDue(ctx, in.Pool(), dbsqlc.ScanDueParams{Tenant: src.Tenant, Source: src.Name, Now: now})
		if err != nil {
			return n, db.Error(err)
		}
		if !due {
			continue
		}
		if _, already, err := Enqueue(ctx, in, src, Trigger{Kind: TriggerSchedule}); err != nil {
			return n, err
		} else if !already {
			n++
		}
	}
	return n, nil
}

// Workers returns the inbox.Options.Workers hook that registers the scan
// worker over s (whose Inbox is set once inbox.New returned).
func Workers(s *Scanner) func(*river.Workers) {
	return func(w *river.Workers) { river.AddWorker(w, &Worker{Scanner: s}) }
}

// Retention is how long scans and their findings are kept: longer than
// any provider's window, so a finding is never forgotten while its event
// can still be listed (it would be judged missed again).
const Retention = 90 * 24 * time.Hour

// Purge ends the queued and running scans no job will end
// (expireStale), then deletes the scans that finished before before,
// with their findings, and returns how many scans it deleted. claimd's maintenance loop calls
// it on every run.
func Purge(ctx context.Context, dbtx claim.DBTX, before time.Time) (int64, error) {
	if err := expireStale(ctx, dbtx, "", ""); err != nil {
		return 0, err
	}
	n, err := queries.PurgeScans(ctx, dbtx, before)
	if err != nil {
		return 0, db.Error(err)
	}
	return n, nil
}
