package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/table"
)

// The statements of outboxd bench and outboxd demo, and of nothing else: they work on a
// table of their own (schema outboxd_bench or outboxd_demo) that no dispatcher of an
// application's shares, and several of them rewrite it wholesale. A dispatcher never
// runs them. They are rendered at each call, not in statements: each runs a handful of
// times per bench phase, where rendering costs nothing beside the phase.

// DropSchema drops schema and everything in it, if it exists. The bench and the demo
// start from nothing with it; the schema is theirs alone.
//
// Concurrency: takes an ACCESS EXCLUSIVE lock on every object in the schema until the
// statement ends; nothing else is meant to use the schema meanwhile.
func DropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+table.Quote(schema)+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// benchEmptySQL removes every row after $1 (the bench's retained rows end there).
//
// Concurrency: row locks on the rows it deletes; it runs between the bench's phases,
// when no dispatcher is running on the table.
const benchEmptySQL = `DELETE FROM {{table}} WHERE id > $1`

// BenchEmpty removes every row whose id is above keepUpTo; with keepUpTo 0 it
// truncates the table. Bench only.
//
// Concurrency: TRUNCATE takes an ACCESS EXCLUSIVE lock on the table until it commits;
// like the DELETE, it runs between phases, with nothing else on the table.
func (s *Store) BenchEmpty(ctx context.Context, keepUpTo int64) error {
	var err error
	if keepUpTo > 0 {
		_, err = s.pool.Exec(ctx, render(benchEmptySQL, s.table), keepUpTo)
	} else {
		_, err = s.pool.Exec(ctx, "TRUNCATE "+s.table.Qualified())
	}
	if err != nil {
		return fmt.Errorf("empty %s: %w", s.table, err)
	}
	return nil
}

// benchRetainSQL writes $3 delivered rows of stream $1 with payload $2, published an
// hour ago, as a deployment with a long retention keeps them.
//
// Concurrency: a plain INSERT; no row is locked beyond the new ones.
const benchRetainSQL = `
INSERT INTO {{table}} (stream, topic, key, payload, status, published_at, created_at, available_at)
SELECT $1, 'retained', 'k' || (g % 1000), $2, 'delivered',
       now() - interval '1 hour', now() - interval '2 hours', now() - interval '2 hours'
FROM generate_series(1, $3) g`

// BenchRetain writes n delivered rows of stream, keys cycling over 1000, and returns
// the highest id in the table afterwards. Bench only.
//
// Concurrency: the INSERT locks only its new rows; max(id) is a plain read.
func (s *Store) BenchRetain(ctx context.Context, stream string, payload []byte, n int) (maxID int64, err error) {
	if _, err := s.pool.Exec(ctx, render(benchRetainSQL, s.table), stream, payload, n); err != nil {
		return 0, fmt.Errorf("write retained rows to %s: %w", s.table, err)
	}
	if err := s.pool.QueryRow(ctx, "SELECT max(id) FROM "+s.table.Qualified()).Scan(&maxID); err != nil {
		return 0, fmt.Errorf("retained rows of %s: %w", s.table, err)
	}
	return maxID, nil
}

// BenchVacuum runs VACUUM ANALYZE on the table, so that every phase plans with fresh
// statistics, as autovacuum would have left them for a backlog built over time. With
// checkpoint it then asks for a CHECKPOINT (a superuser's or pg_checkpoint's right;
// refused quietly otherwise), so that flushing what was written does not fall on the
// next phase. Bench only.
//
// Concurrency: VACUUM takes a SHARE UPDATE EXCLUSIVE lock, which blocks neither reads
// nor writes; CHECKPOINT locks nothing of the table.
func (s *Store) BenchVacuum(ctx context.Context, checkpoint bool) error {
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+s.table.Qualified()); err != nil {
		return fmt.Errorf("vacuum %s: %w", s.table, err)
	}
	if checkpoint {
		_, _ = s.pool.Exec(ctx, "CHECKPOINT")
	}
	return nil
}

// BenchCount counts the rows after id after; with delivered only those marked
// delivered. Bench only.
//
// Concurrency: a plain read; no locks.
func (s *Store) BenchCount(ctx context.Context, after int64, delivered bool) (n int64, err error) {
	where := ""
	if delivered {
		where = " AND status = 'delivered'"
	}
	err = s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.table.Qualified()+" WHERE id > $1"+where, after).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count rows of %s: %w", s.table, err)
	}
	return n, nil
}

// benchUndeliveredSQL names the first row still pending or leased in the undelivered
// index's order, (stream, created_at), from a place at or before it. The ORDER BY is the
// index's own, so the plan reads that index up to its first live entry; asking every
// 10 ms then costs next to nothing. Counting the backlog, or an EXISTS the planner
// answers with a sequential scan, cost enough at that pace to halve the drain being
// measured (seen on a 2-core machine). Starting from the start cost too: the entries of
// every row delivered since the last VACUUM lie ahead of the first live one, 1,600 index
// pages half way through a 1,000,000-row drain (the bench's own 13 % of a core).
//
// Concurrency: a plain read; no locks.
const benchUndeliveredSQL = `SELECT stream, created_at FROM {{table}}
WHERE status IN ('pending', 'leased') AND (stream, created_at) >= ($1::text, $2::timestamptz)
ORDER BY stream, created_at LIMIT 1`

// BenchBacklogMark is where BenchUndelivered found the first undelivered row; the zero
// mark is before every row. Bench only.
type BenchBacklogMark struct {
	stream  string
	created pgtype.Timestamptz
}

// BenchUndelivered reports whether any row is pending or leased, looking from mark on
// and moving mark to the first such row. While no row is inserted (a drain of a filled
// backlog) undelivered rows only leave, so the first one never moves back. Bench only.
func (s *Store) BenchUndelivered(ctx context.Context, mark *BenchBacklogMark) (bool, error) {
	from := mark.created
	if !from.Valid {
		from = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	err := s.pool.QueryRow(ctx, render(benchUndeliveredSQL, s.table), mark.stream, from).Scan(&mark.stream, &mark.created)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("undelivered rows of %s: %w", s.table, err)
	}
	return true, nil
}

// BenchIDs lists the ids of the rows after id after. Bench only.
//
// Concurrency: a plain read; no locks.
func (s *Store) BenchIDs(ctx context.Context, after int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, "SELECT id FROM "+s.table.Qualified()+" WHERE id > $1", after)
	if err != nil {
		return nil, fmt.Errorf("list the rows of %s: %w", s.table, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list the rows of %s: %w", s.table, err)
	}
	return ids, nil
}

// ServerSetting is the server's current value of a setting (current_setting), for the
// bench's report of where its figures were taken.
//
// Concurrency: a plain read; no locks.
func ServerSetting(ctx context.Context, pool *pgxpool.Pool, name string) (string, error) {
	var v string
	if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		return "", fmt.Errorf("read setting %s: %w", name, err)
	}
	return v, nil
}
