package producer_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/store"
)

// benchBatch is the number of messages each benchmark iteration writes in one transaction.
const benchBatch = 500

// benchMessages returns n messages shaped like a typical event: a key, two headers and a
// 1 KiB payload; delayed ones are due in an hour.
func benchMessages(n int, delayed bool) []producer.Message {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i)
	}
	at := time.Time{}
	if delayed {
		at = time.Now().Add(time.Hour)
	}
	msgs := make([]producer.Message, n)
	for i := range msgs {
		msgs[i] = producer.Message{
			Stream:      "orders",
			Topic:       "order.created",
			Key:         "customer-" + strconv.Itoa(i%97),
			Headers:     map[string]string{"content-type": "application/json", "trace-id": strconv.Itoa(i)},
			Payload:     payload,
			AvailableAt: at,
		}
	}
	return msgs
}

// reportPerMessage adds the time per message written, the figure the batch target is set in.
func reportPerMessage(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N*benchBatch), "µs/msg")
}

// benchPgx runs begin, write benchBatch messages, commit per iteration against a fresh table.
func benchPgx(b *testing.B, write func(context.Context, *producer.Writer, pgx.Tx) error) {
	e := setup(b)
	c := ctx(b)
	for b.Loop() {
		tx, err := e.pg.Pool.Begin(c)
		if err != nil {
			b.Fatal(err)
		}
		if err := write(c, e.w, tx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(c); err != nil {
			b.Fatal(err)
		}
	}
	reportPerMessage(b)
}

// benchSQL is benchPgx through database/sql.
func benchSQL(b *testing.B, write func(context.Context, *producer.Writer, *sql.Tx) error) {
	e := setup(b)
	c := ctx(b)
	for b.Loop() {
		tx, err := e.db.BeginTx(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := write(c, e.w, tx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	reportPerMessage(b)
}

func BenchmarkEnqueueBatch(b *testing.B) {
	now, later := benchMessages(benchBatch, false), benchMessages(benchBatch, true)
	size := "/" + strconv.Itoa(benchBatch)
	// COPY, which EnqueueBatch uses when no message sets AvailableAt, against the INSERT
	// over arrays it would use otherwise, for the same messages and for delayed ones.
	b.Run("copy"+size, func(b *testing.B) {
		benchPgx(b, func(ctx context.Context, w *producer.Writer, tx pgx.Tx) error {
			return w.EnqueueBatchCopy(ctx, tx, now)
		})
	})
	b.Run("unnest"+size, func(b *testing.B) {
		benchPgx(b, func(ctx context.Context, w *producer.Writer, tx pgx.Tx) error {
			return w.EnqueueBatchUnnest(ctx, tx, now)
		})
	})
	b.Run("unnest_delayed"+size, func(b *testing.B) {
		benchPgx(b, func(ctx context.Context, w *producer.Writer, tx pgx.Tx) error {
			return w.EnqueueBatchUnnest(ctx, tx, later)
		})
	})
	b.Run("sql"+size, func(b *testing.B) {
		benchSQL(b, func(ctx context.Context, w *producer.Writer, tx *sql.Tx) error {
			return w.EnqueueBatchSQL(ctx, tx, now)
		})
	})
}

func BenchmarkEnqueue(b *testing.B) {
	msgs := benchMessages(benchBatch, false)
	size := "/" + strconv.Itoa(benchBatch)
	b.Run("pgx"+size, func(b *testing.B) {
		benchPgx(b, func(ctx context.Context, w *producer.Writer, tx pgx.Tx) error {
			for _, m := range msgs {
				if _, err := w.Enqueue(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("sql"+size, func(b *testing.B) {
		benchSQL(b, func(ctx context.Context, w *producer.Writer, tx *sql.Tx) error {
			for _, m := range msgs {
				if _, err := w.EnqueueSQL(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// BenchmarkConcurrentEnqueue: 16 producers, each committing one message per transaction,
// with every insert notifying the dispatcher (its pipelines parked) and with the stream's
// flow lock held, as by a flowing pipeline, which stops the notifications. PostgreSQL
// commits the transactions that notified one at a time, through their WAL flush.
func BenchmarkConcurrentEnqueue(b *testing.B) {
	for _, flowing := range []bool{false, true} {
		name := "notifying"
		if flowing {
			name = "flowing"
		}
		b.Run(name, func(b *testing.B) {
			e := setup(b)
			c := ctx(b)
			pc, err := pgxpool.ParseConfig(e.pg.DSN)
			if err != nil {
				b.Fatal(err)
			}
			pc.MaxConns = 20
			pool, err := pgxpool.NewWithConfig(c, pc)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			if flowing {
				st, err := store.New(pool, e.pg.Table)
				if err != nil {
					b.Fatal(err)
				}
				lock, err := st.TryFlow(c, "orders")
				if err != nil || lock == nil {
					b.Fatalf("flow lock: %v, %v", lock, err)
				}
				defer lock.Release(c)
			}
			msg := benchMessages(1, false)[0]
			b.SetParallelism(8) // 16 producers on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					err := pgx.BeginFunc(c, pool, func(tx pgx.Tx) error {
						_, err := e.w.Enqueue(c, tx, msg)
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
		})
	}
}
