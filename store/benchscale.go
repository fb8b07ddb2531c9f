package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The server-wide readings of outboxd bench's scale modes (replicas, many streams): what
// the dispatchers under measurement cost the database, read from the statistics views.
// Bench only; none touches a table.

// BenchConnections counts the server's sessions whose application_name is name: the
// dispatchers the bench started mark their connections with it.
//
// Concurrency: a plain read of pg_stat_activity; no locks.
func BenchConnections(ctx context.Context, pool *pgxpool.Pool, name string) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the sessions of %s: %w", name, err)
	}
	return n, nil
}

// BenchTransactions is the current database's committed and rolled-back transactions so
// far (pg_stat_database), for a rate over a window. The figures lag by up to the
// server's statistics flush interval (a second), so windows should be several seconds.
//
// Concurrency: a plain read of pg_stat_database; no locks.
func BenchTransactions(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return n, nil
}

// BenchBackendPID is the process id of the server process serving one of pool's
// sessions: where the server runs on this machine, /proc shows it.
//
// Concurrency: no locks.
func BenchBackendPID(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var pid int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, fmt.Errorf("read pg_backend_pid: %w", err)
	}
	return pid, nil
}
