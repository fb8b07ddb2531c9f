package producer

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The batch paths, reachable one by one so that tests and benchmarks can exercise each
// whatever EnqueueBatch would pick.

func (w *Writer) EnqueueBatchCopy(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	return w.enqueueCopy(ctx, tx, msgs)
}

func (w *Writer) EnqueueBatchUnnest(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	return w.enqueueUnnest(ctx, tx, msgs)
}

// MaxSQLRows is the most messages one database/sql statement carries.
const MaxSQLRows = maxSQLRows

// LockKeyVersion is the schema version that creates the key lock function.
const LockKeyVersion = lockKeyVersion
