package jetstream_test

import (
	"bytes"
	"context"
	"fmt"
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
	url := testenv.BenchNATSURL(b)
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
	// AllowBatchPublish lets BenchmarkPublishFastIngestFloor use the stream; the other
	// benchmarks publish message by message, which it does not change.
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage,
		AllowBatchPublish: true}); err != nil {
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
			nc := floorConn(b)
			inbox := nc.NewInbox()
			var acked atomic.Int64
			done := make(chan struct{}, 1)
			// Closing nc ends the subscription.
			_, err := nc.Subscribe(inbox+".*", func(*nats.Msg) {
				if acked.Add(1) == int64(size) {
					done <- struct{}{}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			msgs := floorMsgs(size)
			for i, m := range msgs {
				m.Reply = inbox + "." + strconv.Itoa(i)
			}
			var id int64
			cpu := testenv.ProcessCPU()
			b.ResetTimer()
			for b.Loop() {
				acked.Store(0)
				for _, m := range msgs {
					id++
					setFloorID(m, id)
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

// BenchmarkPublishFastIngestFloor is BenchmarkPublishFloor's messages published with the
// server's fast-ingest batch protocol (nats-server 2.14 and later, a stream with
// allow_batched) instead of a PubAck per message: each batch is one fast batch in the
// "gap: fail" mode, whose messages name the batch, their place and their operation in
// their reply subjects; the server answers with a flow acknowledgement every so many
// messages and one PubAck for the whole batch, which is all that is waited for. It
// measures what the client and the server would save with that protocol
// (docs/benchmarks.md); no driver uses it.
func BenchmarkPublishFastIngestFloor(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("jetstream/batch="+strconv.Itoa(size), func(b *testing.B) {
			nc := floorConn(b)
			v := nc.ConnectedServerVersion()
			var major, minor int
			if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil || major*1000+minor < 2014 {
				b.Skipf("fast ingest needs nats-server 2.14 or later; the server is %s", v)
			}
			inbox := nc.NewInbox()
			answers := make(chan []byte, 1)
			var flowAcks atomic.Int64
			// Closing nc ends the subscription.
			_, err := nc.Subscribe(inbox+".>", func(m *nats.Msg) {
				if bytes.HasPrefix(m.Data, []byte(`{"type":"ack"`)) {
					flowAcks.Add(1)
					return
				}
				answers <- m.Data // the batch's PubAck, or an error
			})
			if err != nil {
				b.Fatal(err)
			}
			msgs := floorMsgs(size)
			want := []byte(`"count":` + strconv.Itoa(size) + "}")
			var id, batches int64
			cpu := testenv.ProcessCPU()
			b.ResetTimer()
			for b.Loop() {
				batches++
				// <inbox>.<batch>.<most messages per flow ack>.<gap mode>.<place from 1>.<op>.$FI,
				// op 0 starting the batch, 1 adding to it, 2 committing it.
				prefix := inbox + "." + strconv.FormatInt(batches, 10) + "." + strconv.Itoa(size) + ".fail."
				for i, m := range msgs {
					id++
					setFloorID(m, id)
					op := "1" // adding to the batch
					switch i {
					case size - 1:
						op = "2" // committing it
					case 0:
						op = "0" // starting it
					}
					m.Reply = prefix + strconv.Itoa(i+1) + "." + op + ".$FI"
					if err := nc.PublishMsg(m); err != nil {
						b.Fatal(err)
					}
				}
				select {
				case a := <-answers:
					if !bytes.HasSuffix(a, want) {
						b.Fatalf("batch %d: answer %s, want a PubAck ending %s", batches, a, want)
					}
				case <-time.After(10 * time.Second):
					b.Fatalf("batch %d: no PubAck in 10s", batches)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(flowAcks.Load())/float64(batches), "flow-acks/batch")
			testenv.ReportCPUPerMessage(b, cpu, id)
		})
	}
}

// floorConn connects to the benchmarks' server, with the stream BENCH created afresh, for
// a floor benchmark; the connection closes when b ends.
func floorConn(b *testing.B) *nats.Conn {
	nc, err := nats.Connect(benchStream(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// floorMsgs builds a floor benchmark's size messages once: BenchmarkPublish's payload
// and the headers its driver would set, the outbox ids left to setFloorID.
func floorMsgs(size int) []*nats.Msg {
	payload := bytes.Repeat([]byte("p"), 1024)
	msgs := make([]*nats.Msg, size)
	for i := range msgs {
		msgs[i] = &nats.Msg{Subject: "bench.publish", Data: payload, Header: nats.Header{
			"content-type": {"application/octet-stream"}, router.HeaderStream: {"bench"}, router.HeaderKey: {"key-" + strconv.Itoa(i)},
			router.HeaderID: {""}, router.HeaderMessageID: {""}, nats.MsgIdHdr: {""}}}
	}
	return msgs
}

// setFloorID gives m the outbox id id, a fresh one each time, so that the server drops
// nothing as a duplicate.
func setFloorID(m *nats.Msg, id int64) {
	v := strconv.FormatInt(id, 10)
	m.Header[router.HeaderID][0], m.Header[router.HeaderMessageID][0], m.Header[nats.MsgIdHdr][0] = v, v, v
}
