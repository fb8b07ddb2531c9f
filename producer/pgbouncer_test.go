package producer_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/producer"
)

// Behind PgBouncer in transaction mode, an application's pgx pool runs in exec mode
// (docs/operations.md, Behind PgBouncer); every way of writing works through it, whichever
// server session each transaction lands on.
func TestEveryWayOfWritingWorksThroughPgBouncerInTransactionModeWithExecMode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := testenv.NewPgBouncer(t, 2)
	pc, err := pgxpool.ParseConfig(b.DSN(t, e.pg.DSN))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pc.MaxConns = 1 // one client connection, whose prepared statements pgx would remember
	pool, err := pgxpool.NewWithConfig(ctx(t), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	other, err := pgxpool.New(ctx(t), b.DSN(t, e.pg.DSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })

	msg := func(i int) producer.Message {
		return producer.Message{Stream: "orders", Topic: "placed", Key: "k", Payload: []byte{byte(i)}}
	}
	later := func(i int) producer.Message {
		m := msg(i)
		m.AvailableAt = time.Now().Add(time.Hour)
		return m
	}
	batch := func(f func(int) producer.Message) []producer.Message {
		return []producer.Message{f(1), f(2), f(3)}
	}
	for _, tc := range []struct {
		name   string
		rows   int
		viaSQL bool
		write  func(context.Context, pgx.Tx, *sql.Tx) error
	}{
		{"Enqueue writes one row", 1, false, func(c context.Context, tx pgx.Tx, _ *sql.Tx) error {
			_, err := e.w.Enqueue(c, tx, msg(1))
			return err
		}},
		{"EnqueueBatch writes a batch with COPY", 3, false, func(c context.Context, tx pgx.Tx, _ *sql.Tx) error {
			return e.w.EnqueueBatch(c, tx, batch(msg))
		}},
		{"EnqueueBatch writes a delayed batch as arrays", 3, false, func(c context.Context, tx pgx.Tx, _ *sql.Tx) error {
			return e.w.EnqueueBatch(c, tx, batch(later))
		}},
		{"EnqueueSQL writes one row through database/sql", 1, true, func(c context.Context, _ pgx.Tx, tx *sql.Tx) error {
			_, err := e.w.EnqueueSQL(c, tx, msg(1))
			return err
		}},
		{"EnqueueBatchSQL writes a batch through database/sql", 3, true, func(c context.Context, _ pgx.Tx, tx *sql.Tx) error {
			return e.w.EnqueueBatchSQL(c, tx, batch(msg))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx(t)
			var before int
			if err := e.pg.Pool.QueryRow(c, `SELECT count(*) FROM `+e.pg.Table.Qualified()).Scan(&before); err != nil {
				t.Fatal(err)
			}
			// The second write lands on another server session than the first, the one the
			// first ran on being busy with another client's transaction (PgBouncer lends its
			// most recently idle session first): a statement prepared by the first is not there.
			if err := inTx(c, pool, db, tc.viaSQL, tc.write); err != nil {
				t.Fatalf("first write through PgBouncer: %v", err)
			}
			busy, err := other.Begin(c)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = busy.Rollback(c) }()
			if _, err := busy.Exec(c, `SELECT 1`); err != nil {
				t.Fatal(err)
			}
			if err := inTx(c, pool, db, tc.viaSQL, tc.write); err != nil {
				t.Fatalf("second write through PgBouncer, on another server session: %v", err)
			}
			_ = busy.Rollback(c)
			var after int
			if err := e.pg.Pool.QueryRow(c, `SELECT count(*) FROM `+e.pg.Table.Qualified()).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after-before != 2*tc.rows {
				t.Errorf("%d rows written; want %d", after-before, 2*tc.rows)
			}
		})
	}
}

// inTx runs write in a transaction of db when viaSQL, else of pool, and commits it: one
// server session per client at a time.
func inTx(c context.Context, pool *pgxpool.Pool, db *sql.DB, viaSQL bool, write func(context.Context, pgx.Tx, *sql.Tx) error) error {
	if viaSQL {
		tx, err := db.BeginTx(c, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := write(c, nil, tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	tx, err := pool.Begin(c)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(c) }()
	if err := write(c, tx, nil); err != nil {
		return err
	}
	return tx.Commit(c)
}
