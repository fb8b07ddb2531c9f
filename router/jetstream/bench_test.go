package jetstream_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync/atomic"
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
			url := benchStream(b)
			ctx := context.Background()
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
			cpu := testenv.ProcessCPU()
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
			testenv.ReportCPUPerMessage(b, cpu, id)
		})
	}
}

// benchStream returns the URL of the benchmarks' server, with the stream BENCH for
// bench.> created afresh.
func benchStream(b *testing.B) string {
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
	return url
}

// BenchmarkPublishFloor is BenchmarkPublish's messages published the least a client of
// nats.go can do for them: each message built once with the driver's headers, only its
// ids rewritten; PublishMsg with a reply subject; PubAcks counted, never read. No
// checks, no window, no timeouts: a floor no JetStream driver on this library gets under,
// to set BenchmarkPublish's cpu-µs/msg against (docs/benchmarks.md).
func BenchmarkPublishFloor(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("jetstream/batch="+strconv.Itoa(size), func(b *testing.B) {
			nc, err := nats.Connect(benchStream(b))
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			inbox := nc.NewInbox()
			var acked atomic.Int64
			done := make(chan struct{}, 1)
			// Closing nc ends the subscription.
			_, err = nc.Subscribe(inbox+".*", func(*nats.Msg) {
				if acked.Add(1) == int64(size) {
					done <- struct{}{}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			payload := bytes.Repeat([]byte("p"), 1024)
			msgs := make([]*nats.Msg, size)
			for i := range msgs {
				msgs[i] = &nats.Msg{Subject: "bench.publish", Reply: inbox + "." + strconv.Itoa(i), Data: payload, Header: nats.Header{
					"content-type": {"application/octet-stream"}, router.HeaderStream: {"bench"}, router.HeaderKey: {"key-" + strconv.Itoa(i)},
					router.HeaderID: {""}, router.HeaderMessageID: {""}, nats.MsgIdHdr: {""}}}
			}
			var id int64
			cpu := testenv.ProcessCPU()
			b.ResetTimer()
			for b.Loop() {
				acked.Store(0)
				for _, m := range msgs {
					id++
					v := strconv.FormatInt(id, 10)
					m.Header[router.HeaderID][0], m.Header[router.HeaderMessageID][0], m.Header[nats.MsgIdHdr][0] = v, v, v
					if err := nc.PublishMsg(m); err != nil {
						b.Fatal(err)
					}
				}
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					b.Fatalf("%d of %d PubAcks in 10s", acked.Load(), size)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "msgs/s")
			testenv.ReportCPUPerMessage(b, cpu, id)
		})
	}
}
