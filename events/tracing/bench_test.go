package tracing_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/router"
)

// discard confirms every message without allocating: whatever a benchmark counts is
// the tracing's.
type discard struct{ errs []error }

func newDiscard(n int) *discard { return &discard{errs: make([]error, n)} }

func (d *discard) Publish(_ context.Context, msgs []router.Message) []error {
	return d.errs[:len(msgs)]
}

// batch is a claimed batch of n rows as the pipeline hands it over: each with three
// producer headers, one of them a sampled traceparent.
func batch(n int) []router.Message {
	msgs := make([]router.Message, n)
	created := time.Now()
	for i := range msgs {
		msgs[i] = router.Message{
			ID: int64(1_000_000 + i), Stream: "orders", Topic: "shop.orders.paid", Key: []byte(strconv.Itoa(i)),
			Headers: map[string]string{
				"traceparent":  producerParent,
				"content-type": "application/json",
				"tenant":       "acme",
			},
			Payload: make([]byte, 256), CreatedAt: created,
		}
	}
	return msgs
}

const benchBatch = 100

// benchPublish publishes batches of benchBatch messages through pub and reports the
// allocations per message besides Go's per-batch figures.
func benchPublish(b *testing.B, pub router.Sender) { benchPublishMsgs(b, pub, batch(benchBatch)) }

func benchPublishMsgs(b *testing.B, pub router.Sender, msgs []router.Message) {
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		pub(ctx, msgs)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	msgsSent := float64(b.N) * float64(len(msgs))
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/msgsSent, "allocs/msg")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgsSent, "ns/msg")
}

// BenchmarkPublishTracingOff is the publish path with tracing disabled: Setup's provider
// makes Wrap return the publisher itself. Quoted figure: 0 allocs/msg.
func BenchmarkPublishTracingOff(b *testing.B) {
	tp, _, err := tracing.Setup(context.Background(), config.Tracing{}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	benchPublish(b, tracing.Wrap(newDiscard(benchBatch).Publish, tp, "kafka"))
}

// BenchmarkPublishTracingOn traces every message (sampled) into Setup's provider with
// the batching span processor in front of an exporter that drops what it is given.
func BenchmarkPublishTracingOn(b *testing.B) {
	tp, err := tracing.NewProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), "bench", "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	benchPublish(b, tracing.Wrap(newDiscard(benchBatch).Publish, tp, "kafka"))
}

// BenchmarkPublishTracingOnUnsampled is tracing on with a sample ratio of 0 and
// producers that sent no trace context: spans are not recorded, but every message still
// gets a traceparent of its own.
func BenchmarkPublishTracingOnUnsampled(b *testing.B) {
	tp, err := tracing.NewProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), "bench", "bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	msgs := batch(benchBatch)
	for i := range msgs {
		msgs[i].Headers = map[string]string{"content-type": "application/json", "tenant": "acme"}
	}
	benchPublishMsgs(b, tracing.Wrap(newDiscard(benchBatch).Publish, tp, "kafka"), msgs)
}
