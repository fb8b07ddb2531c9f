package nats_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	natsdriver "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/natsconn"
)

// BenchmarkPublish publishes batches of 1 KiB messages to an embedded server with no
// subscriber (core NATS then discards them): the figure is the driver's publish-and-flush
// cost. Run with a fixed count, e.g. -benchtime=200x.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("nats/batch="+strconv.Itoa(size), func(b *testing.B) {
			srv := testenv.NewNATS(b)
			d, err := natsdriver.New("bench", natsdriver.Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: 10 * time.Second}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			msgs := make([]router.Message, size)
			payload := bytes.Repeat([]byte("p"), 1024)
			for i := range msgs {
				msgs[i] = router.Message{Stream: "bench", Topic: "bench.publish", Payload: payload,
					Headers: map[string]string{"content-type": "application/octet-stream"}}
			}
			ctx := context.Background()
			var id int64
			b.ResetTimer()
			for b.Loop() {
				for i := range msgs {
					id++
					msgs[i].ID = id
				}
				for i, err := range d.Publish(ctx, msgs) {
					if err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
