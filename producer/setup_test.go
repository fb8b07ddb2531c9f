package producer_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/table"
)

func TestMain(m *testing.M) { testenv.Main(runThenDrop{m}) }

// runThenDrop drops the examples' database once every test and example has run.
type runThenDrop struct{ m *testing.M }

func (r runThenDrop) Run() int {
	defer dropExampleDatabase()
	return r.m.Run()
}

// env is one test's outbox table, reachable through pgx and database/sql, and a Writer for it.
type env struct {
	pg *testenv.PG
	db *sql.DB
	w  *producer.Writer
}

func setup(t testing.TB) *env {
	t.Helper()
	pg := testenv.NewPG(t)
	return setupOn(t, pg, pg.Table)
}

// setupOn opens database/sql on pg's database and a Writer for table n.
func setupOn(t testing.TB, pg *testenv.PG, n table.Name) *env {
	t.Helper()
	db, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	w, err := producer.New(n)
	if err != nil {
		t.Fatalf("New(%s): %v", n, err)
	}
	return &env{pg: pg, db: db, w: w}
}

// ctx bounds every database call a test makes.
func ctx(t testing.TB) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// tx is a transaction of either client, so that one test body covers both.
type tx struct {
	pgx pgx.Tx
	sql *sql.Tx
}

func (e *env) beginPgx(t testing.TB) *tx {
	t.Helper()
	x, err := e.pg.Pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Rollback(context.Background()) }) // no-op once committed
	return &tx{pgx: x}
}

func (e *env) beginSQL(t testing.TB) *tx {
	t.Helper()
	x, err := e.db.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Rollback() }) // no-op once committed
	return &tx{sql: x}
}

func (x *tx) commit(t testing.TB) {
	t.Helper()
	var err error
	if x.pgx != nil {
		err = x.pgx.Commit(ctx(t))
	} else {
		err = x.sql.Commit()
	}
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func (x *tx) rollback(t testing.TB) {
	t.Helper()
	var err error
	if x.pgx != nil {
		err = x.pgx.Rollback(ctx(t))
	} else {
		err = x.sql.Rollback()
	}
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
}

// entryPoint is one way the client writes messages. write returns the ids the entry point
// reports (single writes only) and stops at the first error.
type entryPoint struct {
	name  string
	begin func(*env, testing.TB) *tx
	write func(context.Context, *producer.Writer, *tx, []producer.Message) ([]int64, error)
}

func single(c context.Context, w *producer.Writer, x *tx, msgs []producer.Message) ([]int64, error) {
	var ids []int64
	for _, m := range msgs {
		var id int64
		var err error
		if x.pgx != nil {
			id, err = w.Enqueue(c, x.pgx, m)
		} else {
			id, err = w.EnqueueSQL(c, x.sql, m)
		}
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func batch(write func(*producer.Writer, context.Context, pgx.Tx, []producer.Message) error) func(context.Context, *producer.Writer, *tx, []producer.Message) ([]int64, error) {
	return func(c context.Context, w *producer.Writer, x *tx, msgs []producer.Message) ([]int64, error) {
		return nil, write(w, c, x.pgx, msgs)
	}
}

func batchSQL(c context.Context, w *producer.Writer, x *tx, msgs []producer.Message) ([]int64, error) {
	return nil, w.EnqueueBatchSQL(c, x.sql, msgs)
}

// publicEntryPoints are the four methods applications call.
var publicEntryPoints = []entryPoint{
	{"Enqueue", (*env).beginPgx, single},
	{"EnqueueBatch", (*env).beginPgx, batch((*producer.Writer).EnqueueBatch)},
	{"EnqueueSQL", (*env).beginSQL, single},
	{"EnqueueBatchSQL", (*env).beginSQL, batchSQL},
}

// allEntryPoints adds each pgx batch path on its own, whichever EnqueueBatch picks.
var allEntryPoints = append(publicEntryPoints[:len(publicEntryPoints):len(publicEntryPoints)],
	entryPoint{"EnqueueBatch by COPY", (*env).beginPgx, batch((*producer.Writer).EnqueueBatchCopy)},
	entryPoint{"EnqueueBatch by unnest", (*env).beginPgx, batch((*producer.Writer).EnqueueBatchUnnest)},
)

// row is an outbox row as the producer wrote it, with the defaults it depends on.
type row struct {
	ID          int64
	Stream      string
	Topic       string
	Key         *string
	Headers     map[string]string
	Payload     []byte
	AvailableAt time.Time
	MessageID   *string
	CreatedAt   time.Time
	Status      string
	ExpiresAt   *time.Time
}

// rows reads every row of table n in id order.
func (e *env) rows(t testing.TB, n table.Name) []row {
	t.Helper()
	rs, err := e.pg.Pool.Query(ctx(t), `SELECT id, stream, topic, key, headers, payload, available_at,
		message_id, created_at, status, expires_at FROM `+n.Qualified()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// count is the number of rows in table n.
func (e *env) count(t testing.TB, n table.Name) int {
	t.Helper()
	var c int
	if err := e.pg.Pool.QueryRow(ctx(t), "SELECT count(*) FROM "+n.Qualified()).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// defaultTableDatabase is a database of its own with outbox.messages migrated, for the
// package-level functions, which always write there; with a pool on it.
func defaultTableDatabase(t *testing.T) (dsn string, pool *pgxpool.Pool) {
	t.Helper()
	dsn = testenv.EmptyDatabase(t)
	if err := migrations.Up(ctx(t), dsn, table.Default); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return dsn, pool
}
