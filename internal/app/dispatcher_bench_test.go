package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// benchStream narrows a world to one stream on one driver with the given batch size.
func benchStream(w *world, stream string, batch int) *config.Config {
	cfg := w.cfg
	s := cfg.Streams[stream]
	s.BatchSize = batch
	cfg.Streams = map[string]config.Stream{stream: s}
	return &cfg
}

// BenchmarkDrain measures how fast one dispatcher drains a backlog of b.N messages
// (200-byte payloads) through each real driver, in msgs/s. Run with a fixed count:
//
//	go test -run '^$' -bench Drain -benchtime 20000x ./internal/app/
func BenchmarkDrain(b *testing.B) {
	streams := []struct{ driver, stream string }{{"kafka", "orders"}, {"nats", "payments"}, {"jetstream", "shipments"}}
	for _, s := range streams {
		for _, batch := range []int{100, 500} {
			b.Run(fmt.Sprintf("%s/batch=%d", s.driver, batch), func(b *testing.B) {
				w := newWorld(b)
				topic := map[string]string{"orders": kafkaTopic, "payments": "captured", "shipments": "sent"}[s.stream]
				_, err := w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, payload)
					SELECT $1, $2, 'key-' || (g % 50), convert_to(repeat('p', 200), 'UTF8') FROM generate_series(1, $3) g`, s.stream, topic, b.N)
				must(b, err)
				_, err = w.pg.Pool.Exec(w.ctx, `VACUUM ANALYZE `+w.pg.Table.Qualified())
				must(b, err)
				d, err := NewDispatcher(w.ctx, benchStream(w, s.stream, batch), slog.New(slog.DiscardHandler), Options{})
				must(b, err)
				ctx, cancel := context.WithCancel(w.ctx)
				done := make(chan error, 1)
				b.ResetTimer()
				start := time.Now()
				go func() { done <- d.Run(ctx) }()
				for {
					var pending int
					must(b, w.pg.Pool.QueryRow(w.ctx, `SELECT count(*) FROM `+w.pg.Table.Qualified()+` WHERE status <> 'delivered'`).Scan(&pending))
					if pending == 0 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				cancel()
				must(b, <-done)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			})
		}
	}
}

// confirmations announces each message a broker confirmed.
type confirmations struct {
	ch chan time.Time
}

func (c *confirmations) middleware(_ router.Destination, next router.Sender) router.Sender {
	return func(ctx context.Context, msgs []router.Message) []error { return c.publish(ctx, msgs, next) }
}

func (c *confirmations) publish(ctx context.Context, msgs []router.Message, next router.Sender) []error {
	errs := next(ctx, msgs)
	now := time.Now()
	for _, err := range errs {
		if err == nil {
			c.ch <- now
		}
	}
	return errs
}

// BenchmarkIdleLatency measures commit → broker confirmation for one message at a time
// through an idle pipeline with default settings (the listener wakes it), per driver.
// It reports p50, p99 and max in ms:
//
//	go test -run '^$' -bench IdleLatency -benchtime 300x ./internal/app/
func BenchmarkIdleLatency(b *testing.B) {
	for _, s := range []struct{ driver, stream, topic string }{{"kafka", "orders", kafkaTopic}, {"nats", "payments", "captured"}, {"jetstream", "shipments", "sent"}} {
		b.Run(s.driver, func(b *testing.B) {
			w := newWorld(b)
			cfg := benchStream(w, s.stream, config.DefaultStream().BatchSize)
			st := cfg.Streams[s.stream]
			st.PollInterval = config.DefaultStream().PollInterval // defaults: notifications do the work
			cfg.Streams[s.stream] = st
			conf := &confirmations{ch: make(chan time.Time, 16)}
			d, err := NewDispatcher(w.ctx, cfg, slog.New(slog.DiscardHandler), Options{
				Middleware: []router.Middleware{conf.middleware},
			})
			must(b, err)
			ctx, cancel := context.WithCancel(w.ctx)
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			for !d.listener.Connected() {
				time.Sleep(time.Millisecond)
			}
			// Warm up connections and the broker's metadata.
			insertOne := func() time.Time {
				_, err := w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, payload) VALUES ($1, $2, 'x')`, s.stream, s.topic)
				must(b, err)
				return time.Now()
			}
			insertOne()
			<-conf.ch
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				committed := insertOne()
				select {
				case at := <-conf.ch:
					lat = append(lat, at.Sub(committed))
				case <-time.After(10 * time.Second):
					b.Fatalf("message %d not confirmed within 10s", i)
				}
			}
			b.StopTimer()
			cancel()
			must(b, <-done)
			slices.Sort(lat)
			b.ReportMetric(percentileMs(lat, 0.50), "p50-ms")
			b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// percentileMs is the q-quantile of sorted latencies, in milliseconds.
func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1))].Microseconds()) / 1000
}
