package jetstream_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
)

// BenchmarkPublish publishes batches of 1 KiB messages, each confirmed by its PubAck,
// to a file-storage stream on an embedded server, with the default window
// (max_in_flight 1024). Run with a fixed count, e.g. -benchtime=200x.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("jetstream/batch="+strconv.Itoa(size), func(b *testing.B) {
			srv := testenv.NewNATS(b)
			nc, err := nats.Connect(srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			admin, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage}); err != nil {
				b.Fatal(err)
			}
			d, err := jsdriver.New("bench", config.Driver{Type: config.TypeJetStream, URL: srv.URL(), PublishTimeout: 10 * time.Second}, nil)
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
			var id int64
			b.ResetTimer()
			for b.Loop() {
				for i := range msgs {
					id++ // a fresh outbox id each time, so nothing is dropped as a duplicate
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
