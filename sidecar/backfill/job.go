package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
)

// ScanArgs is the River job that runs one scan of a source. It is unique
// per tenant and source while queued or running (InsertOpts: only the
// fields tagged unique count), so one scan of a source runs at a time
// across replicas, however many the schedule, the API and the console ask
// for.
type ScanArgs struct {
	Tenant  string `json:"tenant" river:"unique"`
	Source  string `json:"source" river:"unique"`
	Trigger string `json:"trigger"`
	Actor   string `json:"actor,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// ScanID is the backfill_scans row (result queued) made with the job.
	ScanID int64 `json:"scan_id,omitempty"`
	// From and To are the range asked for (Trigger.From, To), nil for
	// the source's default.
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
}

// Kind implements river.JobArgs.
func (ScanArgs) Kind() string { return "claimd_backfill_scan" }

// InsertOpts are a scan job's: River's default queue, one attempt (the
// next scan is the retry), unique by tenant and source among the jobs not
// finished yet.
func InsertOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: river.QueueDefault, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByArgs: true,
		ByState: []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled}}}
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

// Work runs the scan of its queued row; a source no longer configured
// (or no longer with backfill, or of another tenant now) is skipped, its
// queued row ended error.
func (w *Worker) Work(ctx context.Context, job *river.Job[ScanArgs]) error {
	a := job.Args
	src := w.Scanner.Inbox.TriggerSource(a.Source)
	if src == nil || src.Tenant != a.Tenant || src.Backfill == nil {
		w.Scanner.Log.Info().Str("source", a.Source).Msg("backfill scan skipped: the source has no backfill now")
		if a.ScanID != 0 {
			if _, err := w.Scanner.Inbox.Pool().Exec(ctx, `UPDATE backfill_scans SET result = 'error', error = $2,
				finished_at = now() WHERE id = $1 AND result = 'queued'`, a.ScanID, errNoBackfillNow); err != nil {
				return claim.DBError(err)
			}
		}
		return nil
	}
	trig := Trigger{Kind: a.Trigger, Actor: a.Actor, Mode: ingest.BackfillMode(a.Mode), ScanID: a.ScanID}
	if a.From != nil {
		trig.From = *a.From
	}
	if a.To != nil {
		trig.To = *a.To
	}
	_, err := w.Scanner.Run(ctx, src, trig)
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
// with trig's kind, actor, mode and range; a zero bound is stored NULL,
// the source's default) and its River job (ScanArgs with the row's id)
// are made in one transaction, so the caller has the scan's id at once
// and a queued row always has its job. When a scan of the source is
// queued or running already (the job is unique per tenant and source),
// nothing is made and that scan is returned with already true (its own
// mode and range, not trig's). Queued rows of the source whose job is
// gone, and running rows whose job no longer runs, are ended first
// (expireStale). trig.Mode must be a mode ModeFor
// allows ("" the source's). Errors: the database's (claim.DBError).
func Enqueue(ctx context.Context, in *ingest.Inbox, src *ingest.Source, trig Trigger) (sc Scan, already bool, err error) {
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
	// A job found a duplicate whose scan row is gone by the time it is
	// read (the scan just ended) is asked for again, once.
	for try := 0; try < 2; try++ {
		var existing int64
		err = claim.RunTx(ctx, in.Pool(), func(tx pgx.Tx) error {
			existing = 0
			if err := expireStale(ctx, tx, src.Tenant, src.Name); err != nil {
				return err
			}
			var actor *string
			if trig.Actor != "" {
				actor = &trig.Actor
			}
			s, err := scanScan(tx.QueryRow(ctx, `INSERT INTO backfill_scans (tenant, source, trigger, actor, mode, result,
				range_start, range_end) VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7) RETURNING `+scanColumns,
				src.Tenant, src.Name, trig.Kind, actor, string(mode), from, to))
			if err != nil {
				return err
			}
			res, err := in.EnqueueTx(ctx, tx, ScanArgs{Tenant: src.Tenant, Source: src.Name, Trigger: trig.Kind,
				Actor: trig.Actor, Mode: string(mode), ScanID: s.ID, From: from, To: to}, InsertOpts())
			if err != nil {
				return err
			}
			if res.UniqueSkippedAsDuplicate {
				var a ScanArgs
				if json.Unmarshal(res.Job.EncodedArgs, &a) == nil {
					existing = a.ScanID
				}
				if existing == 0 {
					existing = -1
				}
				return errDuplicate
			}
			sc = s
			return nil
		})
		if err == nil {
			return sc, false, nil
		}
		if !errors.Is(err, errDuplicate) {
			return Scan{}, false, claim.DBError(err)
		}
		// The scan queued or running: its own row, or (a job whose scan
		// made its row when it started) the source's latest unfinished.
		q := `SELECT ` + scanColumns + ` FROM backfill_scans WHERE tenant = $1 AND source = $2 AND id = $3`
		if existing < 0 {
			q = `SELECT ` + scanColumns + ` FROM backfill_scans WHERE tenant = $1 AND source = $2 AND $3 < 0
				AND result IN ('queued', 'running') ORDER BY id DESC LIMIT 1`
		}
		s, err := scanScan(in.Pool().QueryRow(ctx, q, src.Tenant, src.Name, existing))
		if err == nil {
			return s, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Scan{}, false, claim.DBError(err)
		}
	}
	return Scan{}, false, &apperr.Error{Code: apperr.Unavailable,
		Message: "a scan of this source was ending while another was asked for: ask again"}
}

var errDuplicate = errors.New("a scan of the source is queued or running")

// expireStale ends the scans (of tenant's source; every source when
// tenant is "") that no River job will ever end, result error:
//
//   - a queued row whose job is no longer queued or running ("the scan
//     never ran"). A queued row is made in one transaction with its job,
//     so such a row's job was lost (cancelled, discarded after a crash of
//     its replica, or cleaned away);
//   - a running row whose job is no longer running ("the scan stopped"):
//     claimd was stopped or crashed mid-scan, and River has since rescued
//     or cleaned away the job (a job of a crashed replica stays running
//     until River's rescuer discards it, Worker.Timeout after it
//     started: the source's max_wait_seconds plus 10 minutes). A running
//     row is its job's when
//     the job's scan_id names it; a job that names no running row (its
//     row not started yet, or made before jobs carried scan_id) answers
//     for every running row of its source.
//
// Without it such a row would say queued or running for ever.
func expireStale(ctx context.Context, db claim.DBTX, tenant, source string) error {
	_, err := db.Exec(ctx, `UPDATE backfill_scans s SET result = '`+ResultError+`', error = $3, finished_at = now()
		WHERE s.result = '`+ResultQueued+`' AND ($1 = '' OR (s.tenant = $1 AND s.source = $2))
		AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'claimd_backfill_scan'
			AND j.args->>'scan_id' = s.id::text
			AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled'))`, tenant, source, errNeverRan)
	if err != nil {
		return claim.DBError(err)
	}
	_, err = db.Exec(ctx, `UPDATE backfill_scans s SET result = '`+ResultError+`', error = $3, finished_at = now()
		WHERE s.result = '`+ResultRunning+`' AND ($1 = '' OR (s.tenant = $1 AND s.source = $2))
		AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'claimd_backfill_scan' AND j.state = 'running'
			AND j.args->>'tenant' = s.tenant AND j.args->>'source' = s.source
			AND (j.args->>'scan_id' = s.id::text OR NOT EXISTS (SELECT 1 FROM backfill_scans o
				WHERE o.id::text = j.args->>'scan_id' AND o.result = '`+ResultRunning+`')))`, tenant, source, errStopped)
	if err != nil {
		return claim.DBError(err)
	}
	return nil
}

// Sources returns the configured sources with backfill, ingest doors and
// trigger sources.
func Sources(in *ingest.Inbox) []*ingest.Source {
	var out []*ingest.Source
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
func Schedule(ctx context.Context, in *ingest.Inbox, now time.Time) (int, error) {
	n := 0
	for _, src := range Sources(in) {
		if src.Backfill.Interval <= 0 {
			continue
		}
		var due bool
		if err := in.Pool().QueryRow(ctx, `SELECT COALESCE((SELECT next_scan_at <= $3 FROM backfill_state
			WHERE tenant = $1 AND source = $2), true)`, src.Tenant, src.Name, now).Scan(&due); err != nil {
			return n, claim.DBError(err)
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

// Workers returns the ingest.Options.Workers hook that registers the scan
// worker over s (whose Inbox is set once ingest.New returned).
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
func Purge(ctx context.Context, db claim.DBTX, before time.Time) (int64, error) {
	if err := expireStale(ctx, db, "", ""); err != nil {
		return 0, err
	}
	tag, err := db.Exec(ctx, `DELETE FROM backfill_scans WHERE id IN (SELECT id FROM backfill_scans
		WHERE finished_at < $1 ORDER BY id LIMIT 1000)`, before)
	if err != nil {
		return 0, claim.DBError(err)
	}
	return tag.RowsAffected(), nil
}
