package store_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkClaimAck measures the SQL ceiling of a drain: one claim and one ack per
// iteration, no broker. Each iteration moves one batch; the reported msgs/s is the
// figure to compare with a real drain (outboxd bench) on the same machine.
func BenchmarkClaimAck(b *testing.B) {
	for _, batch := range []int{100, 500, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			f := setupB(b)
			f.insertPayload(b, "orders", b.N*batch, 1024)
			b.ResetTimer()
			start := time.Now()
			moved := 0
			for i := 0; i < b.N; i++ {
				c, err := f.store.Claim(f.ctx, "orders", batch, "bench", 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				res, err := f.store.Ack(f.ctx, c.Token, c.IDs())
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
