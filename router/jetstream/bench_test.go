package jetstream_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/natsconn"
)

// BenchmarkPublish publishes batches of 1 KiB messages with a key and a producer header,
// each confirmed by its PubAck, to a file-storage stream with the default window
// (max_in_flight 1024). Run with a fixed count, e.g. -benchtime=1000x.
//
// The server is embedded unless OUTBOXD_BENCH_NATS_URL names one (JetStream enabled; the
// stream BENCH is deleted and recreated). cpu-µs/msg is this process's CPU time per
// message: the driver's alone against a server of its own process, the driver's and the
// server's against the embedded one.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("jetstream/batch="+strconv.Itoa(size), func(b *testing.B) {
			url := os.Getenv("OUTBOXD_BENCH_NATS_URL")
			if url == "" {
				url = testenv.NewNATS(b).URL()
			}
			nc, err := nats.Connect(url)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			admin, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			_ = admin.DeleteStream(ctx, "BENCH")
			if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage}); err != nil {
				b.Fatal(err)
			}
			d, err := jsdriver.New("bench", jsdriver.Options{Options: natsconn.Options{URL: url, PublishTimeout: 10 * time.Second}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			msgs := make([]router.Message, size)
			payload := bytes.Repeat([]byte("p"), 1024)
			for i := range msgs {
				msgs[i] = router.Message{Stream: "bench", Topic: "bench.publish", Payload: payload, Key: []byte("key-" + strconv.Itoa(i)),
					Headers: map[string]string{"content-type": "application/octet-stream"}}
			}
			var id int64
			cpu := processCPU()
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
			b.StopTimer()
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "msgs/s")
			if cpu >= 0 {
				b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(id), "cpu-µs/msg")
			}
		})
	}
}
