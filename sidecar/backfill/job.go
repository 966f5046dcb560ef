package backfill

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
)

// ScanArgs is the River job that runs one scan of a source. It is unique
// per tenant and source while queued or running (InsertOpts), so one scan
// of a source runs at a time across replicas, however many the schedule,
// the API and the console ask for.
type ScanArgs struct {
	Tenant  string `json:"tenant" river:"unique"`
	Source  string `json:"source" river:"unique"`
	Trigger string `json:"trigger"`
	Actor   string `json:"actor,omitempty"`
	Mode    string `json:"mode,omitempty"`
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

// Work runs the scan; a source no longer configured (or no longer with
// backfill, or of another tenant now) is skipped.
func (w *Worker) Work(ctx context.Context, job *river.Job[ScanArgs]) error {
	a := job.Args
	src := w.Scanner.Inbox.TriggerSource(a.Source)
	if src == nil || src.Tenant != a.Tenant || src.Backfill == nil {
		w.Scanner.Log.Info().Str("source", a.Source).Msg("backfill scan skipped: the source has no backfill now")
		return nil
	}
	_, err := w.Scanner.Run(ctx, src, Trigger{Kind: a.Trigger, Actor: a.Actor, Mode: ingest.BackfillMode(a.Mode)})
	return err
}

// Enqueue queues a scan of src; already reports that one was queued or
// running already (nothing new queued).
func Enqueue(ctx context.Context, in *ingest.Inbox, src *ingest.Source, trig Trigger) (jobID int64, already bool, err error) {
	if src.Backfill == nil {
		return 0, false, errors.New("the source has no backfill configuration")
	}
	return in.Enqueue(ctx, ScanArgs{Tenant: src.Tenant, Source: src.Name, Trigger: trig.Kind, Actor: trig.Actor, Mode: string(trig.Mode)}, InsertOpts())
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

// Purge deletes the scans that finished before before, with their
// findings, and returns how many scans it deleted.
func Purge(ctx context.Context, db claim.DBTX, before time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM backfill_scans WHERE id IN (SELECT id FROM backfill_scans
		WHERE finished_at < $1 ORDER BY id LIMIT 1000)`, before)
	if err != nil {
		return 0, claim.DBError(err)
	}
	return tag.RowsAffected(), nil
}
