package producer_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/producer"
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
