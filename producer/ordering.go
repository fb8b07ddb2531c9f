package producer

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// lockKeySQL takes a transaction-scoped advisory lock on one key of one stream of one
// outbox table. Two different keys may share a lock by hash collision; that only makes
// one producer wait for the other's commit. Parameters: $1 table, $2 stream, $3 key.
const lockKeySQL = `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2 || chr(31) || $3))`

// LockKey makes the producers of one key of an ordered stream take turns: it waits until
// no other open transaction holds the same key, and holds it until tx commits or rolls
// back. Call it before enqueueing a keyed message when several transactions may write
// the same key at once and their order matters: the id that orders a key's messages is
// drawn when the row is inserted, but a row becomes visible only when its transaction
// commits, so without the lock a later message could be delivered before an earlier one
// whose transaction commits last (docs/ordering.md). It needs no privilege. A
// transaction that already locks the business row the message is about (SELECT … FOR
// UPDATE before the INSERT) is serialised by that lock and needs no other.
func (w *Writer) LockKey(ctx context.Context, tx pgx.Tx, stream, key string) error {
	if err := w.ready(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, lockKeySQL, w.table.Qualified(), stream, key); err != nil {
		return fmt.Errorf("producer: lock key %q of stream %q in %s: %w", key, stream, w.table, err)
	}
	return nil
}

// LockKeySQL is LockKey for database/sql.
func (w *Writer) LockKeySQL(ctx context.Context, tx *sql.Tx, stream, key string) error {
	if err := w.ready(); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, lockKeySQL, w.table.Qualified(), stream, key); err != nil {
		return fmt.Errorf("producer: lock key %q of stream %q in %s: %w", key, stream, w.table, err)
	}
	return nil
}

// LockKey is Writer.LockKey on outbox.messages.
func LockKey(ctx context.Context, tx pgx.Tx, stream, key string) error {
	return defaultWriter().LockKey(ctx, tx, stream, key)
}
