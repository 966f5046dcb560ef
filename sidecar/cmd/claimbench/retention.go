package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

// The retention section (-retention-keys N; alone with -retention-only):
// what a kept key costs and what the purge costs while N keys are kept
// (case B21: a key outlives its payload). In a scratch database of its
// own (dropped at the end, unless -keep-db) it writes with generate_series
//
//   - N kept keys: completed records of one source whose payload was
//     purged (no inbox row, one payload_purged delivery-log entry), last
//     changed 31 to 399 days ago, so inside the default key retention;
//   - -retention-due records past the payload retention (31 to 33 days
//     old) with everything ingest and one dispatch store: inbox body
//     (-retention-body-bytes) and headers, four delivery-log entries;
//   - -retention-due records past the key retention (401 to 430 days).
//
// It prints the size of every table and index per kept key (after VACUUM,
// so dead rows do not count) and the average row sizes, then runs the
// ledger's own Purge (default policy: payloads after 30 days, keys after
// 400) with -purge-batch rows per statement, timing every statement
// through a pgx tracer, then Purge with nothing due (the cost of every
// maintenance tick while N keys are kept). The plans of one batch of each
// statement, and of each with nothing due, are printed from EXPLAIN
// ANALYZE in rolled-back transactions. Last come the sizes again, over the
// kept keys plus the records whose payload the run purged.

// retentionSource is the source of every synthetic record.
const retentionSource = "svix"

// purgeKinds are the purge statements, told apart by their text.
var purgeKinds = []struct{ name, marker string }{
	{"keys", "DELETE FROM claims USING doomed"},
	{"payloads", "payload_purged_at = statement_timestamp()"},
	{"conflicts", "FOR UPDATE OF f SKIP LOCKED"},
}

// purgeTracer times every purge statement the ledger sends.
type purgeTracer struct {
	mu    sync.Mutex
	sql   map[string]string // kind → statement text
	args  map[string][]any  // kind → last arguments
	times map[string][]time.Duration
}

type traceKey struct{}

type traceStart struct {
	kind string
	at   time.Time
}

func newPurgeTracer() *purgeTracer {
	return &purgeTracer{sql: map[string]string{}, args: map[string][]any{}, times: map[string][]time.Duration{}}
}

func (p *purgeTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	for _, k := range purgeKinds {
		if strings.Contains(d.SQL, k.marker) {
			p.mu.Lock()
			p.sql[k.name], p.args[k.name] = d.SQL, append([]any(nil), d.Args...)
			p.mu.Unlock()
			return context.WithValue(ctx, traceKey{}, traceStart{kind: k.name, at: time.Now()})
		}
	}
	return ctx
}

func (p *purgeTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceKey{}).(traceStart); ok {
		p.mu.Lock()
		p.times[s.kind] = append(p.times[s.kind], time.Since(s.at))
		p.mu.Unlock()
	}
}

// take returns and resets the statement times by kind.
func (p *purgeTracer) take() map[string][]time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.times
	p.times = map[string][]time.Duration{}
	return t
}

func runRetention(ctx context.Context, out io.Writer, serverURL string, s settings) error {
	keys, due := s.retentionKeys, min(s.retentionDue, s.retentionKeys)
	db, err := createDatabase(ctx, serverURL)
	if err != nil {
		return err
	}
	if s.keepDB {
		fmt.Fprintf(out, "retention:   keeping database %s\n", db.name)
	} else {
		defer db.drop()
	}
	pc, err := pgxpool.ParseConfig(libpqURL(db.url))
	if err != nil {
		return err
	}
	pc.MaxConns = 2
	tr := newPurgeTracer()
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	settings, err := queries.BenchSettings(ctx, pool)
	if err != nil {
		return err
	}
	version, sharedBuffers := settings.ServerVersion, settings.SharedBuffers
	fmt.Fprintf(out, "\nretention: what a kept key costs, and the purge with %d keys kept (case B21)\n", keys)
	fmt.Fprintf(out, "setup:       PostgreSQL %s (shared_buffers %s), scratch database %s, purge batch %d,\n"+
		"             default policy (payload retention %s, key retention %s)\n",
		version, sharedBuffers, db.name, s.purgeBatch, claim.DefaultRetention, claim.DefaultKeyRetention)

	g := &retentionGen{pool: pool, body: s.retentionBody}
	start := time.Now()
	if err := g.kept(ctx, 1, keys); err != nil {
		return fmt.Errorf("write kept keys: %w", err)
	}
	if err := vacuum(ctx, pool); err != nil {
		return err
	}
	fmt.Fprintf(out, "generated:   %d kept keys in %s (generate_series, chunks of %d)\n", keys, since(start), genChunk)
	keptSizes, err := sizes(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nbytes per kept key (completed, payload purged; after VACUUM; heap incl. page overhead and free space):\n")
	printSizes(out, keptSizes, nil, keys)
	if err := printRowSizes(ctx, out, pool, "kept keys as generated"); err != nil {
		return err
	}

	start = time.Now()
	if err := g.due(ctx, keys+1, keys+due); err != nil {
		return fmt.Errorf("write records due for the payload purge: %w", err)
	}
	if err := vacuum(ctx, pool); err != nil {
		return err
	}
	fullSizes, err := sizes(ctx, pool)
	if err != nil {
		return err
	}
	if err := g.expired(ctx, keys+due+1, keys+2*due); err != nil {
		return fmt.Errorf("write records past the key retention: %w", err)
	}
	if err := vacuum(ctx, pool); err != nil {
		return err
	}
	fmt.Fprintf(out, "generated:   %d records due for the payload purge (body %d bytes, 4 log entries) and %d past the key retention in %s\n",
		due, s.retentionBody, due, since(start))
	if due > 0 {
		fmt.Fprintf(out, "\nbytes per record before the payload purge (growth per due record):\n")
		printSizes(out, fullSizes, keptSizes, due)
	}

	// The statements as the ledger sends them, captured from a Purge whose
	// retentions nothing reaches, then explained with the real ones.
	probe, err := claim.New(pool, claim.Config{Policies: claim.Policies{Default: claim.Policy{
		Retention: 100 * claim.DefaultKeyRetention, KeyRetention: 100 * claim.DefaultKeyRetention}}})
	if err != nil {
		return err
	}
	if _, err := probe.Purge(ctx, s.purgeBatch); err != nil {
		return err
	}
	tr.take()
	fmt.Fprintf(out, "\nplans, one batch of each statement (EXPLAIN ANALYZE in a rolled-back transaction):\n")
	if err := explainAll(ctx, out, pool, tr, map[string]time.Duration{"keys": claim.DefaultKeyRetention,
		"payloads": claim.DefaultRetention, "conflicts": claim.DefaultRetention}); err != nil {
		return err
	}

	l, err := claim.New(pool, claim.Config{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\npurge (ledger.Purge, as `claimd purge` and the maintenance tick run it):\n")
	start = time.Now()
	res, err := l.Purge(ctx, s.purgeBatch)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	times := tr.take()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "statement\tstatements\trows\ttotal s\trows/s\tp50 ms\tp99 ms\tmax ms\t")
	for _, k := range []struct {
		name string
		rows int
	}{{"keys", res.KeysDeleted}, {"payloads", res.PayloadsPurged}, {"conflicts", res.ConflictsPurged}} {
		ts := times[k.name]
		var total time.Duration
		for _, d := range ts {
			total += d
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		rate := 0.0
		if total > 0 {
			rate = float64(k.rows) / total.Seconds()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.0f\t%.1f\t%.1f\t%.1f\t\n", k.name, len(ts), k.rows, total.Seconds(), rate,
			ms(quantile(ts, 0.5)), ms(quantile(ts, 0.99)), ms(quantile(ts, 1)))
	}
	tw.Flush()
	fmt.Fprintf(out, "             whole run %s; %d keys deleted, %d payloads purged\n", elapsed.Round(time.Millisecond),
		res.KeysDeleted, res.PayloadsPurged)
	if res.KeysDeleted != due || res.PayloadsPurged != due {
		return fmt.Errorf("the purge removed %d keys and %d payloads, want %d each", res.KeysDeleted, res.PayloadsPurged, due)
	}

	// Nothing due: what every maintenance tick costs while the keys are kept.
	var idle []time.Duration
	for range 5 {
		start = time.Now()
		res, err = l.Purge(ctx, s.purgeBatch)
		if err != nil {
			return err
		}
		idle = append(idle, time.Since(start))
		if res != (claim.PurgeResult{}) {
			return fmt.Errorf("a second purge removed %+v", res)
		}
	}
	tr.take()
	sort.Slice(idle, func(i, j int) bool { return idle[i] < idle[j] })
	fmt.Fprintf(out, "idle purge:  nothing due, %d keys kept: %s per run (median of 5, 3 statements)\n", keys+due,
		quantile(idle, 0.5).Round(10*time.Microsecond))
	fmt.Fprintf(out, "plans, nothing due:\n")
	if err := explainAll(ctx, out, pool, tr, nil); err != nil {
		return err
	}

	if err := vacuum(ctx, pool); err != nil {
		return err
	}
	after, err := sizes(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nbytes per kept key after the run (%d generated + %d purged by it; after VACUUM, so the\n"+
		"space the purge freed is counted as free space of the tables, reused by new rows):\n", keys, due)
	printSizes(out, after, nil, keys+due)
	return printRowSizes(ctx, out, pool, "kept keys after the run")
}

// genChunk is the number of records one generating statement writes.
const genChunk = 250_000

type retentionGen struct {
	pool *pgxpool.Pool
	body int
}

// chunks runs fn over [from, to] in chunks of genChunk.
func chunks(from, to int, fn func(lo, hi int) error) error {
	for lo := from; lo <= to; lo += genChunk {
		if err := fn(lo, min(lo+genChunk-1, to)); err != nil {
			return err
		}
	}
	return nil
}

// kept writes records whose payload was purged, last changed 31 to 399
// days ago, each with its payload_purged delivery-log entry.
func (g *retentionGen) kept(ctx context.Context, from, to int) error {
	return chunks(from, to, func(lo, hi int) error {
		return queries.GenerateKeptKeys(ctx, g.pool, dbsqlc.GenerateKeptKeysParams{Tenant: benchTenant, Source: retentionSource,
			FromI: int32(lo), ToI: int32(hi)})
	})
}

// due writes records past the payload retention with everything ingest
// and one dispatch store: inbox row (body, headers) and four log entries.
func (g *retentionGen) due(ctx context.Context, from, to int) error {
	if to < from {
		return nil
	}
	return chunks(from, to, func(lo, hi int) error {
		return queries.GenerateDueKeys(ctx, g.pool, dbsqlc.GenerateDueKeysParams{Tenant: benchTenant, Source: retentionSource,
			FromI: int32(lo), ToI: int32(hi), BodyBytes: int32(g.body)})
	})
}

// expired writes kept keys last changed 401 to 430 days ago.
func (g *retentionGen) expired(ctx context.Context, from, to int) error {
	if to < from {
		return nil
	}
	return chunks(from, to, func(lo, hi int) error {
		return queries.GenerateExpiredKeys(ctx, g.pool, dbsqlc.GenerateExpiredKeysParams{Tenant: benchTenant,
			Source: retentionSource, FromI: int32(lo), ToI: int32(hi)})
	})
}

func vacuum(ctx context.Context, pool *pgxpool.Pool) error {
	return queries.VacuumLedger(ctx, pool)
}

// relSize is the size of one table or index, in bytes.
type relSize struct {
	table, name string
	index       bool
	bytes       int64
}

// sizes lists the ledger tables and their indexes (TOAST counted with its
// table), in a fixed order.
func sizes(ctx context.Context, pool *pgxpool.Pool) ([]relSize, error) {
	rows, err := queries.LedgerSizes(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := make([]relSize, len(rows))
	for i, r := range rows {
		out[i] = relSize{table: r.TableName, name: r.Name, index: r.IsIndex, bytes: r.Bytes}
	}
	return out, nil
}

// printSizes prints every relation's size per record (the growth since
// base when base is given) and the totals.
func printSizes(out io.Writer, now, base []relSize, per int) {
	if per <= 0 {
		return
	}
	was := map[string]int64{}
	for _, s := range base {
		was[s.name] = s.bytes
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "relation\t\tMB\tbytes/record\t")
	var total, heap int64
	for _, s := range now {
		b := s.bytes - was[s.name]
		if b == 0 && s.bytes == 0 {
			continue
		}
		kind := "table"
		if s.index {
			kind = "index"
		} else {
			heap += b
		}
		total += b
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t\n", s.name, kind, float64(b)/(1<<20), float64(b)/float64(per))
	}
	fmt.Fprintf(tw, "total\t\t%.1f\t%.1f\t\n", float64(total)/(1<<20), float64(total)/float64(per))
	fmt.Fprintf(tw, "  of which tables\t\t%.1f\t%.1f\t\n", float64(heap)/(1<<20), float64(heap)/float64(per))
	fmt.Fprintf(tw, "  of which indexes\t\t%.1f\t%.1f\t\n", float64(total-heap)/(1<<20), float64(total-heap)/float64(per))
	tw.Flush()
}

// printRowSizes prints the average stored size of a kept record's row and
// of its delivery-log entry (pg_column_size of the whole row: the tuple
// with its header, without the 4-byte line pointer).
func printRowSizes(ctx context.Context, out io.Writer, pool *pgxpool.Pool, what string) error {
	r, err := queries.KeptRowSizes(ctx, pool)
	if err != nil {
		return err
	}
	claimRow, n, logRow := r.ClaimRow, r.Kept, r.LogRow
	fmt.Fprintf(out, "row sizes:   %s (%d): claims row %.0f bytes, payload_purged entry %.0f bytes (pg_column_size of\n"+
		"             the row: tuple header included, the 4-byte line pointer not)\n", what, n, claimRow, logRow)
	return nil
}

// explainAll prints the plan nodes of each purge statement the tracer
// captured, executed (EXPLAIN ANALYZE) in a rolled-back transaction, with
// the retention of retentions[kind] when given (else as last sent).
func explainAll(ctx context.Context, out io.Writer, pool *pgxpool.Pool, tr *purgeTracer, retentions map[string]time.Duration) error {
	tr.mu.Lock()
	sqls, args := tr.sql, tr.args
	tr.mu.Unlock()
	for _, k := range purgeKinds {
		sql, ok := sqls[k.name]
		if !ok {
			return fmt.Errorf("no %s purge statement seen", k.name)
		}
		a := append([]any(nil), args[k.name]...)
		if r, ok := retentions[k.name]; ok {
			// retention_seconds, each purge statement's first argument
			// (dbsqlc.PurgeKeysParams and its like).
			a[0] = r.Seconds()
		}
		plan, err := explain(ctx, pool, sql, a)
		if err != nil {
			return fmt.Errorf("explain the %s purge: %w", k.name, err)
		}
		fmt.Fprintf(out, "  %s:\n", k.name)
		for _, line := range plan {
			t := strings.TrimSpace(line)
			if strings.HasPrefix(t, "->") || strings.HasPrefix(t, "Index Cond") || strings.HasPrefix(t, "Execution Time") ||
				(line == plan[0]) {
				fmt.Fprintf(out, "    %s\n", line)
			}
		}
	}
	return nil
}

func explain(ctx context.Context, pool *pgxpool.Pool, sql string, args []any) ([]string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, explainSQL(sql), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// quantile returns the q-quantile (nearest rank) of sorted durations.
func quantile(ts []time.Duration, q float64) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	i := int(float64(len(ts))*q+0.999999) - 1
	return ts[max(0, min(i, len(ts)-1))]
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// checkRetentionFlags validates the retention section's flags.
func checkRetentionFlags(s settings) error {
	switch {
	case s.retentionKeys < 0 || s.retentionDue < 0:
		return errors.New("-retention-keys and -retention-due cannot be negative")
	case s.retentionOnly && s.retentionKeys == 0:
		return errors.New("-retention-only needs -retention-keys (e.g. 10000000)")
	case s.retentionBody < 64 || s.retentionBody > 1<<20:
		return errors.New("-retention-body-bytes must be between 64 and 1048576")
	case s.purgeBatch < 1:
		return errors.New("-purge-batch must be at least 1")
	}
	return nil
}
