package db

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A pipeline sends several statements in one round trip (one pgx.Batch)
// through the methods sqlc generates (package dbsqlc), so that their
// arguments and rows stay typed and named: each method is called twice,
// first on a Queue, which adds its statement and arguments to the batch
// and returns ErrQueued, then, once the batch is sent, on the Results of
// the batch, which hands the method the next result to read (the
// arguments of that second call are not used). The second calls must
// follow the order of the first, as the results of a batch do.
//
//	b := &pgx.Batch{}
//	queue := db.Queue(b)
//	_, _ = queries.Fail(ctx, queue, p1)
//	_, _ = queries.Fail(ctx, queue, p2)
//	results := db.Results(tx.SendBatch(ctx, b))
//	defer results.Close()
//	row1, err := queries.Fail(ctx, results, dbsqlc.FailParams{})
//	row2, err := queries.Fail(ctx, results, dbsqlc.FailParams{})

// ErrQueued is what a method called on a Queue returns: its statement was
// added to the batch, and its result is read from the batch's Results.
var ErrQueued = errors.New("db: statement queued in a pipeline")

// BatchQueue is the DBTX of Queue.
type BatchQueue struct{ b *pgx.Batch }

// Queue returns the DBTX that adds the statements of the methods called
// on it to b.
func Queue(b *pgx.Batch) BatchQueue { return BatchQueue{b: b} }

// Exec queues sql and returns ErrQueued.
func (q BatchQueue) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, ErrQueued
}

// Query queues sql and returns ErrQueued.
func (q BatchQueue) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.b.Queue(sql, args...)
	return nil, ErrQueued
}

// QueryRow queues sql; the row's Scan returns ErrQueued.
func (q BatchQueue) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.b.Queue(sql, args...)
	return queuedRow{}
}

type queuedRow struct{}

func (queuedRow) Scan(...any) error { return ErrQueued }

// BatchResults is the DBTX of Results.
type BatchResults struct{ br pgx.BatchResults }

// Results returns the DBTX that reads the results of br, in order, for
// the methods called on it; their statements and arguments are not used.
// Close it (Close) once read.
func Results(br pgx.BatchResults) BatchResults { return BatchResults{br: br} }

// Exec reads the next result as a command tag.
func (r BatchResults) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return r.br.Exec()
}

// Query reads the next result as rows.
func (r BatchResults) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return r.br.Query()
}

// QueryRow reads the next result as one row.
func (r BatchResults) QueryRow(context.Context, string, ...any) pgx.Row {
	return r.br.QueryRow()
}

// Close closes the batch's results (pgx.BatchResults.Close): the error of
// the first statement that failed, if a result was not read.
func (r BatchResults) Close() error { return r.br.Close() }
