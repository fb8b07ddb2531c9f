package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/store"
)

// BenchmarkClaimAck measures the SQL ceiling of a drain: one claim and one ack per
// iteration, no broker, 1 KiB payloads. Each iteration moves one batch; msgs/s is the
// figure to compare with a real drain on the same machine. The commit=async variants
// run the same statements with synchronous_commit off on the dispatcher's session
// (safe for at-least-once delivery: a lost acknowledgement only re-publishes), and the
// ack=delete variants delete delivered rows instead of updating them (retention 0).
//
//	go test -run '^$' -bench ClaimAck -benchtime 40x ./store/
func BenchmarkClaimAck(b *testing.B) {
	for _, commit := range []string{"commit=sync", "commit=async", "ack=delete"} {
		for _, batch := range []int{100, 500, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", commit, batch), func(b *testing.B) {
				f := setupB(b)
				st := f.store
				if commit == "ack=delete" {
					var err error
					if st, err = store.New(f.pg.Pool, f.pg.Table, store.WithAckByDelete()); err != nil {
						b.Fatal(err)
					}
				}
				if commit == "commit=async" {
					pool := f.poolWith(b, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off" })
					defer pool.Close()
					var err error
					if st, err = store.New(pool, f.pg.Table); err != nil {
						b.Fatal(err)
					}
				}
				f.insertPayload(b, "orders", b.N*batch, 1024)
				b.ResetTimer()
				start := time.Now()
				moved := 0
				for i := 0; i < b.N; i++ {
					c, err := st.Claim(f.ctx, "orders", batch, "bench", 30*time.Second, store.Position{})
					if err != nil {
						b.Fatal(err)
					}
					res, err := st.Ack(f.ctx, c.Token, c.IDs())
					if err != nil {
						b.Fatal(err)
					}
					if res.Changed != len(c.Messages) || len(c.Messages) != batch {
						b.Fatalf("claimed %d, acked %d, want %d", len(c.Messages), res.Changed, batch)
					}
					moved += res.Changed
				}
				b.ReportMetric(float64(moved)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkOrderedClaimAck compares, in one run, the claim and ack of an unordered
// stream with and without the key order index of schema version 2 (what version 2
// costs streams that are not ordered), and the ordered claim over 1000 keys and over a
// single hot key. Batch 100, 1 KiB payloads.
//
//	go test -run '^$' -bench OrderedClaimAck -benchtime 100x -count 3 ./store/
func BenchmarkOrderedClaimAck(b *testing.B) {
	const batch = 100
	for _, v := range []struct {
		name         string
		keys         int
		ordered      bool
		dropKeyIndex bool
	}{
		{"unordered/key-index=dropped", 1000, false, true},
		{"unordered/key-index=kept", 1000, false, false},
		{"ordered/keys=1000", 1000, true, false},
		{"ordered/keys=1", 1, true, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			f := setupB(b)
			if v.dropKeyIndex {
				if _, err := f.pg.Pool.Exec(f.ctx, `DROP INDEX `+f.pg.Table.Derived("key_order_idx")); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
				SELECT 'orders', 't', 'k' || (g % $2), convert_to(repeat('x', 1024), 'UTF8') FROM generate_series(1, $1) g`,
				b.N*batch, v.keys); err != nil {
				b.Fatal(err)
			}
			if _, err := f.pg.Pool.Exec(f.ctx, `ANALYZE `+f.pg.Table.Qualified()); err != nil {
				b.Fatal(err)
			}
			var cur store.KeyCursor
			b.ResetTimer()
			start := time.Now()
			moved := 0
			for moved < b.N*batch {
				var c store.Claim
				var err error
				if v.ordered {
					c, err = f.store.ClaimOrdered(f.ctx, "orders", batch, "bench", 30*time.Second, &cur)
				} else {
					c, err = f.store.Claim(f.ctx, "orders", batch, "bench", 30*time.Second, store.Position{})
				}
				if err != nil {
					b.Fatal(err)
				}
				if len(c.Messages) == 0 {
					b.Fatalf("claim empty with %d of %d rows moved", moved, b.N*batch)
				}
				res, err := f.store.Ack(f.ctx, c.Token, c.IDs())
				if err != nil {
					b.Fatal(err)
				}
				moved += res.Changed
			}
			b.ReportMetric(float64(moved)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
