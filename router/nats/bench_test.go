package nats_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	natsdriver "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/natsconn"
)

// BenchmarkPublish publishes batches of 1 KiB messages to a server with no subscriber
// (core NATS then discards them): the figure is the driver's publish-and-flush cost. The
// server is embedded unless OUTBOXD_BENCH_NATS_URL names one; cpu-µs/msg is then the
// driver's and the server's CPU time, else the driver's alone. Run with a fixed count,
// e.g. -benchtime=200x.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("nats/batch="+strconv.Itoa(size), func(b *testing.B) {
			d, err := natsdriver.New("bench", natsdriver.Options{Options: natsconn.Options{URL: testenv.BenchNATSURL(b), PublishTimeout: 10 * time.Second}}, nil)
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
			cpu := testenv.ProcessCPU()
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
			b.StopTimer()
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "msgs/s")
			testenv.ReportCPUPerMessage(b, cpu, id)
		})
	}
}

// BenchmarkPublishFloor is BenchmarkPublish's messages published the least a client of
// nats.go can do for them, to set BenchmarkPublish's cpu-µs/msg against: each message
// built once with the driver's headers, only its ids rewritten; PublishMsg, then one
// Flush per batch; no checks, no watch on the connection.
func BenchmarkPublishFloor(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("nats/batch="+strconv.Itoa(size), func(b *testing.B) {
			nc, err := natsgo.Connect(testenv.BenchNATSURL(b))
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			payload := bytes.Repeat([]byte("p"), 1024)
			msgs := make([]*natsgo.Msg, size)
			for i := range msgs {
				msgs[i] = &natsgo.Msg{Subject: "bench.publish", Data: payload, Header: natsgo.Header{
					"content-type": {"application/octet-stream"}, router.HeaderStream: {"bench"},
					router.HeaderID: {""}, router.HeaderMessageID: {""}}}
			}
			var id int64
			cpu := testenv.ProcessCPU()
			b.ResetTimer()
			for b.Loop() {
				for _, m := range msgs {
					id++
					v := strconv.FormatInt(id, 10)
					m.Header[router.HeaderID][0], m.Header[router.HeaderMessageID][0] = v, v
					if err := nc.PublishMsg(m); err != nil {
						b.Fatal(err)
					}
				}
				if err := nc.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "msgs/s")
			testenv.ReportCPUPerMessage(b, cpu, id)
		})
	}
}
