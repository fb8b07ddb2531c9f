package postgres

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/outboxd/outboxd/router"
)

// BenchmarkPublish inserts batches of 1 KiB messages, each with a fresh message id,
// into an inbox on the local server, one Publish at a time. Quote it with a fixed count:
//
//	go test -run '^$' -bench BenchmarkPublish -benchtime 200x ./router/postgres/
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			in := newInbox(b)
			d := newDriver(b, in.options())
			payload := bytes.Repeat([]byte{'x'}, 1024)
			msgs := make([]router.Message, size)
			for i := range msgs {
				msgs[i] = router.Message{
					ID: int64(i), Stream: "bench", Topic: "bench", Key: []byte("key-" + strconv.Itoa(i%50)),
					Headers: map[string]string{"content-type": "application/json"}, Payload: payload,
				}
			}
			ctx := context.Background()
			run := 0
			publish := func() {
				run++
				for i := range msgs {
					msgs[i].RowDedupID = strconv.Itoa(run) + "-" + strconv.Itoa(i)
				}
				for i, err := range d.Publish(ctx, msgs) {
					if err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			publish() // a connection and the prepared statement in place
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				publish()
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
