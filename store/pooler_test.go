package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// pooled opens a pool on dsn with mode, closed when t ends.
func pooled(t *testing.T, dsn string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestThePoolerProbeFindsPgBouncerInTransactionMode(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	b := testenv.NewPgBouncer(t, 4)
	cfg, err := pgx.ParseConfig(b.DSN(t, pg.DSN))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	behind, err := store.BehindPooler(ctx, cfg)
	if err != nil || !behind {
		t.Fatalf("BehindPooler through PgBouncer = %v, %v; want true", behind, err)
	}
}

func TestThePoolerProbeNeverReportsADirectConnection(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	cfg, err := pgx.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		if behind, err := store.BehindPooler(ctx, cfg); err != nil || behind {
			t.Fatalf("probe %d on a direct connection = %v, %v; want false", i, behind, err)
		}
	}
}

// A client's second run of a statement lands on another server session when the one it
// prepared the statement on is busy with another client's transaction.
func TestNamedPreparedStatementsBreakThroughTransactionPoolingAndExecModeDoesNot(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	b := testenv.NewPgBouncer(t, 4)
	dsn := b.DSN(t, pg.DSN)
	for _, tc := range []struct {
		name  string
		mode  pgx.QueryExecMode
		fails bool
	}{
		{"pgx's default, a cache of named prepared statements, loses them", pgx.QueryExecModeCacheStatement, true},
		{"exec mode, unnamed statements only, keeps working", pgx.QueryExecModeExec, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := pooled(t, dsn, tc.mode)
			other := pooled(t, dsn, tc.mode)
			q := `SELECT count(*) FROM ` + pg.Table.Qualified() + ` WHERE stream = $1`
			var n int64
			if err := client.QueryRow(ctx, q, "s").Scan(&n); err != nil {
				t.Fatalf("first run: %v", err)
			}
			// The other client's transaction takes the server session the statement was
			// prepared on (PgBouncer hands out its most recently idle one).
			tx, err := other.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				t.Fatal(err)
			}
			err = client.QueryRow(ctx, q, "s").Scan(&n)
			switch {
			case tc.fails && (err == nil || !strings.Contains(err.Error(), "does not exist")):
				t.Fatalf("second run on another server session = %v; want a prepared statement that does not exist", err)
			case !tc.fails && err != nil:
				t.Fatalf("second run on another server session: %v", err)
			}
		})
	}
}

func TestSessionLocksGoToTheDirectPoolBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	b := testenv.NewPgBouncer(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	replica := func() *store.Store {
		st, err := store.New(pooled(t, b.DSN(t, pg.DSN), pgx.QueryExecModeExec), pg.Table,
			store.WithSessions(pooled(t, pg.DSN, pgx.QueryExecModeCacheStatement)))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	first, second := replica(), replica()
	lock, err := first.TryLock(ctx)
	if err != nil || lock == nil {
		t.Fatalf("first replica's janitor lock = %v, %v", lock, err)
	}
	t.Cleanup(func() { lock.Release(ctx) }) // before the pools close, which waits for it
	// Through the pooler, the second would land on the server session the first took
	// the lock on, and an advisory lock is re-entrant within a session.
	again, err := second.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again != nil {
		t.Cleanup(func() { again.Release(ctx) })
		t.Fatal("both replicas hold the janitor lock at once")
	}
	lock.Release(ctx)
	if again, err = second.TryLock(ctx); err != nil || again == nil {
		t.Fatalf("second replica's janitor lock once the first released it = %v, %v", again, err)
	}
	again.Release(ctx)
}

// TestPostgreSQLAnnouncesTheSessionsOwnProcessAndPgBouncerOneOfItsOwn holds the premise
// of the pooler probe's first-round answer: a session's announced process id (its
// cancellation key) is the server process that serves it on PostgreSQL itself, and is
// not through a transaction pooler, which makes up keys of its own.
func TestPostgreSQLAnnouncesTheSessionsOwnProcessAndPgBouncerOneOfItsOwn(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	b := testenv.NewPgBouncer(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, dsn string
		same      bool
	}{
		{"directly", pg.DSN, true},
		{"through PgBouncer", b.DSN(t, pg.DSN), false},
	} {
		conn, err := pgx.Connect(ctx, tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		var pid int32
		err = conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid)
		announced := conn.PgConn().PID()
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if same := uint32(pid) == announced; same != tc.same {
			t.Errorf("%s: announced process %d, served by %d; want them the same: %v", tc.name, announced, pid, tc.same)
		}
	}
}
