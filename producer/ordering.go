package producer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// lockKeyVersion is the schema version that creates the key lock function
// (migrations/0005_lock_key.up.sql).
const lockKeyVersion = 5

// LockKey makes the producers of one key of an ordered stream take turns: it waits until
// no other open transaction holds the same key, and holds it until tx commits or rolls
// back. Call it before enqueueing a keyed message when several transactions may write
// the same key at once and their order matters: the id that orders a key's messages is
// drawn when the row is inserted, but a row becomes visible only when its transaction
// commits, so without the lock a later message could be delivered before an earlier one
// whose transaction commits last (docs/ordering.md). A transaction that already locks
// the business row the message is about (SELECT … FOR UPDATE before the INSERT) is
// serialised by that lock and needs no other.
//
// It calls the table's lock function, so Go and SQL producers of one key exclude each
// other; the function is executable by every role. On a schema older than version 5,
// which lacks the function, it fails saying to run `outboxd migrate up`, and tx is
// aborted as by any failed statement.
func (w *Writer) LockKey(ctx context.Context, tx pgx.Tx, stream, key string) error {
	if err := w.ready(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, w.lockKey, stream, key); err != nil {
		return w.lockKeyError(stream, key, err)
	}
	return nil
}

// LockKeySQL is LockKey for database/sql.
func (w *Writer) LockKeySQL(ctx context.Context, tx *sql.Tx, stream, key string) error {
	if err := w.ready(); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, w.lockKey, stream, key); err != nil {
		return w.lockKeyError(stream, key, err)
	}
	return nil
}

// lockKeyError names the lock that failed and, when the function or its schema is
// missing, the command that creates it: PostgreSQL's own "function does not exist"
// does not say that the schema is merely older than this client.
func (w *Writer) lockKeyError(stream, key string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "3F000") { // undefined_function, invalid_schema_name
		return fmt.Errorf("producer: lock key %q of stream %q in %s: the schema has no %s, which migration version %d creates: "+
			"run `outboxd migrate up` (or apply the migrations) on this database: %w",
			key, stream, w.table, w.table.Derived("lock_key"), lockKeyVersion, err)
	}
	return fmt.Errorf("producer: lock key %q of stream %q in %s: %w", key, stream, w.table, err)
}

// LockKey is Writer.LockKey on outbox.messages.
func LockKey(ctx context.Context, tx pgx.Tx, stream, key string) error {
	return defaultWriter().LockKey(ctx, tx, stream, key)
}
