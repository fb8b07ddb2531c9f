package store_test

import (
	"context"
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
					cfg, err := pgxpool.ParseConfig(f.pg.DSN)
					if err != nil {
						b.Fatal(err)
					}
					cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
					pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
					if err != nil {
						b.Fatal(err)
					}
					defer pool.Close()
					if st, err = store.New(pool, f.pg.Table); err != nil {
						b.Fatal(err)
					}
				}
				f.insertPayload(b, "orders", b.N*batch, 1024)
				b.ResetTimer()
				start := time.Now()
				moved := 0
				for i := 0; i < b.N; i++ {
					c, err := st.Claim(f.ctx, "orders", batch, "bench", 30*time.Second)
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
