package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SchemaVersion reads the migration version golang-migrate recorded for this table:
// 0 when no migration ran. It only reads, so a role without DDL rights can check it.
// /readyz asks it, on the pool.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	return s.schemaVersion(ctx, s.pool)
}

// SchemaVersionOn is SchemaVersion asked on conn, an open connection to the store's
// database (outboxd's start asks on one it opened anyway, before the pool has any).
func (s *Store) SchemaVersionOn(ctx context.Context, conn *pgx.Conn) (version uint, dirty bool, err error) {
	return s.schemaVersion(ctx, conn)
}

// schemaVersion asks q with the simple protocol: one round trip on a connection that
// has not prepared the statement (the start's, and the first /readyz's after it), and
// a transaction pooler forwards it. The table is read at once, not first looked up in
// the catalog: a missing one (or its schema) is an error that answers as well.
func (s *Store) schemaVersion(ctx context.Context, q querier) (version uint, dirty bool, err error) {
	var v int64
	err = q.QueryRow(ctx, s.sql.schemaVersion, pgx.QueryExecModeSimpleProtocol).Scan(&v, &dirty)
	var pg *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case errors.As(err, &pg) && pg.Code == "42P01": // undefined_table, also when its schema is missing
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read schema version of %s: %w", s.table, err)
	}
	return uint(v), dirty, nil
}
