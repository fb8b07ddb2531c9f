package redis

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/outboxd/outboxd/router"
)

// BenchmarkPublish publishes batches of 1 KiB messages over 50 keys to one stream of
// the test server, one Publish at a time. Quote it with a fixed count:
//
//	go test -run '^$' -bench BenchmarkPublish -benchtime 200x ./router/redis/
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			addr, c := server(b)
			o := testOptions(addr)
			o.MaxLen = 10000 // keep the server's memory bounded however long it runs
			d := newDriver(b, o)
			key := uniqueKey(b, c, "bench")
			payload := bytes.Repeat([]byte{'x'}, 1024)
			msgs := make([]router.Message, size)
			for i := range msgs {
				msgs[i] = router.Message{
					ID: int64(i), Stream: "bench", Topic: key, Key: []byte("key-" + strconv.Itoa(i%50)),
					Headers: map[string]string{"content-type": "application/json"}, Payload: payload,
				}
			}
			ctx := context.Background()
			publish := func() {
				for i, err := range d.Publish(ctx, msgs) {
					if err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			publish() // the connection in place
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				publish()
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
