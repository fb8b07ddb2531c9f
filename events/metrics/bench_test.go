package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/events/metrics"
)

// BenchmarkHandleIteration measures the metrics' share of one pipeline iteration: a full
// batch of 100 with its 100 delivery lags, as the bus hands it over. Quoted in
// docs/metrics.md; run with -benchtime=100000x for fixed iteration counts.
func BenchmarkHandleIteration(b *testing.B) {
	m := metrics.New(prometheus.NewRegistry(), map[string]string{"orders": "bus"}, map[string]string{"bus": "kafka"}, metrics.BuildInfo{})
	lags := make([]time.Duration, 100)
	for i := range lags {
		lags[i] = time.Duration(i) * time.Millisecond
	}
	var e events.Event = events.Iteration{
		Stream: "orders", Claimed: 100, Published: 97, Retried: 1, Failed: 2,
		FailReasons: map[string]int{"permanent": 2}, ErrorKinds: map[string]int{"permanent": 2, "retryable": 1},
		DeliveryLags: lags, Claim: time.Millisecond, Publish: 5 * time.Millisecond, WriteBack: 2 * time.Millisecond,
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Handle(e)
	}
}

// BenchmarkHandleSmallEvent is the cost of an event with no per-message content.
func BenchmarkHandleSmallEvent(b *testing.B) {
	m := metrics.New(prometheus.NewRegistry(), map[string]string{"orders": "bus"}, map[string]string{"bus": "kafka"}, metrics.BuildInfo{})
	var e events.Event = events.Backlog{Stream: "orders", Pending: 10, Leased: 3, OldestPendingAge: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		m.Handle(e)
	}
}
