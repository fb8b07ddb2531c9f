package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// dueSQL finds, in one statement for the whole table, the streams that have pending
// rows, and whether each has one to claim now (available_at passed) or to expire
// (expires_at passed). A skip scan of the claim index (stream, available_at, id) WHERE
// pending: each step of the recursion probes the index once for the first pending row of
// the next stream, which is also its earliest available one; the expiry check probes the
// expiry index (stream, expires_at). Delivered rows are never visited, so its cost grows
// with the streams that have pending rows, not with the table. Read only, no locks: a
// stale answer costs a claim that finds nothing, or a wait of one more poll. Times are
// the database's.
const dueSQL = `
WITH RECURSIVE pending AS (
    (SELECT stream, available_at FROM {{table}}
     WHERE status = 'pending'
     ORDER BY stream, available_at LIMIT 1)
    UNION ALL
    SELECT next.stream, next.available_at
    FROM pending, LATERAL (
        SELECT stream, available_at FROM {{table}}
        WHERE status = 'pending' AND stream > pending.stream
        ORDER BY stream, available_at LIMIT 1) AS next
)
SELECT stream, available_at <= now() OR EXISTS (
    SELECT 1 FROM {{table}} AS e
    WHERE e.stream = pending.stream AND e.status = 'pending'
      AND e.expires_at IS NOT NULL AND e.expires_at <= now())
FROM pending`

// DueStreams names every stream with pending rows, true for those with a row to claim
// or to expire now: what the dispatcher's shared poll wakes pipelines for.
func (s *Store) DueStreams(ctx context.Context) (map[string]bool, error) {
	return s.dueStreams(ctx, s.pool)
}

// DueStreamsOn is DueStreams asked on n's connection, between its LISTEN and its first
// wait (at start, the shared poll's first question), with the simple protocol: one
// round trip, and nothing prepared on a session that asks once. It then LISTENs again
// (a no-op for the server), so that the session's last statement, which
// pg_stat_activity shows, is its LISTEN, as on every listening session.
func (s *Store) DueStreamsOn(ctx context.Context, n *Notifications) (map[string]bool, error) {
	due, err := s.dueStreams(ctx, n.conn, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	if _, err := n.conn.Exec(ctx, "LISTEN "+s.table.ListenChannel(), pgx.QueryExecModeSimpleProtocol); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", s.table.Channel(), err)
	}
	return due, nil
}

func (s *Store) dueStreams(ctx context.Context, q querier, args ...any) (map[string]bool, error) {
	rows, err := q.Query(ctx, s.sql.due, args...)
	if err != nil {
		return nil, fmt.Errorf("due streams in %s: %w", s.table, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var stream string
		var due bool
		if err := rows.Scan(&stream, &due); err != nil {
			return nil, fmt.Errorf("due streams in %s: %w", s.table, err)
		}
		out[stream] = due
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("due streams in %s: %w", s.table, err)
	}
	return out, nil
}
