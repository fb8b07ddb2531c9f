package dispatch_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events/metrics"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/store"
)

// replayedOnce fails unless every original row was copied by replays exactly once, and
// every copy was delivered.
func (f *fixture) replayedOnce(t *testing.T, originals int) {
	t.Helper()
	q := f.pg.Table.Qualified()
	var distinct, copies, undelivered, strays int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT count(DISTINCT c.headers->>'Outbox-Replay-Of'), count(*),
		count(*) FILTER (WHERE c.status <> 'delivered'),
		count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM `+q+` o WHERE o.dedup_id::text = c.headers->>'Outbox-Replay-Of'))
		FROM `+q+` c WHERE c.headers ? 'Outbox-Replay'`).Scan(&distinct, &copies, &undelivered, &strays))
	if distinct != originals || copies != originals || undelivered != 0 || strays != 0 {
		t.Fatalf("%d copies of %d distinct originals (%d undelivered, %d copying no original); want each of %d copied once and delivered",
			copies, distinct, undelivered, strays, originals)
	}
}

func TestAReplayInsideJetStreamsDuplicateWindowIsStoredAgainOnceEach(t *testing.T) {
	t.Parallel()
	replayThroughJetStream(t, 300, dispatch.PipelineConfig{})
}

// TestAReplayOf100000MessagesArrivesAgainOnceEach is the closing note's measurement:
// OUTBOXD_TEST_REPLAY_100K=1 go test ./dispatch/ -run 100000 -v
func TestAReplayOf100000MessagesArrivesAgainOnceEach(t *testing.T) {
	if os.Getenv("OUTBOXD_TEST_REPLAY_100K") != "1" {
		t.Skip("set OUTBOXD_TEST_REPLAY_100K=1 to replay 100,000 messages through JetStream and time it")
	}
	replayThroughJetStream(t, 100_000, dispatch.PipelineConfig{BatchSize: 500})
}

// replayThroughJetStream delivers n messages to a JetStream stream whose duplicate
// window outlasts the test, replays them all while the pipeline runs, and checks that
// the stream then holds each original once and each one's copy once, read back by
// Outbox-Message-Id and Outbox-Replay-Of.
func replayThroughJetStream(t *testing.T, n int, cfg dispatch.PipelineConfig) {
	t.Helper()
	f := setup(t)
	srv := testenv.NewNATS(t)
	js, err := jetstream.New(dlNATSClient(t, srv.URL()))
	must(t, err)
	stream, err := js.CreateStream(f.ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"shop.>"}, Duplicates: time.Hour})
	must(t, err)
	opts := jsdriver.DefaultOptions()
	opts.URL = srv.URL()
	d, err := jsdriver.New("js", opts, nil)
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "js", Driver: d, TopicPrefix: "shop."}})
	must(t, err)
	pub, err := r.Publisher("orders")
	must(t, err)

	f.insert(t, "orders", n)
	began := time.Now()
	stop := run(t, pipeline(t, f, cfg, pub, newRecorder()))
	waitFor(t, 5*time.Minute, "every row delivered", func() bool { return f.counts(t)["delivered"] == n })
	t.Logf("%d originals delivered in %v", n, time.Since(began).Round(time.Millisecond))

	began = time.Now()
	res, err := ops.New(f.store, nil).Replay(f.ctx, ops.ReplayRequest{Stream: "orders"}, ops.ReplayOptions{})
	if err != nil || res.Copied != int64(n) {
		t.Fatalf("replay: %+v %v", res, err)
	}
	copied := time.Since(began)
	waitFor(t, 5*time.Minute, "every copy delivered", func() bool { return f.counts(t)["delivered"] == 2*n })
	t.Logf("replay %d: %d copied in %v, all delivered again %v after it started", res.ID, n,
		copied.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	stop()

	info, err := stream.Info(f.ctx)
	must(t, err)
	if info.State.Msgs != uint64(2*n) {
		t.Fatalf("the stream stored %d messages, want %d: the broker absorbed the replay as duplicates", info.State.Msgs, 2*n)
	}
	cons, err := stream.OrderedConsumer(f.ctx, jetstream.OrderedConsumerConfig{})
	must(t, err)
	replayOf := make(map[string]int, n)
	ids := make(map[string]int, n)
	for read := 0; read < 2*n; {
		batch, err := cons.Fetch(min(1000, 2*n-read), jetstream.FetchMaxWait(10*time.Second))
		must(t, err)
		for m := range batch.Messages() {
			read++
			if of := m.Headers().Get("Outbox-Replay-Of"); of != "" {
				replayOf[of]++
			} else {
				ids[m.Headers().Get(router.HeaderMessageID)]++
			}
		}
		must(t, batch.Error())
	}
	for id, c := range ids {
		if replayOf[id] != 1 || c != 1 {
			t.Fatalf("original %s arrived %d times and was replayed %d times, want once each", id, c, replayOf[id])
		}
	}
	if len(ids) != n || len(replayOf) != n {
		t.Fatalf("%d originals and %d replayed ids arrived, want %d each", len(ids), len(replayOf), n)
	}
}

func TestTwoReplaysOfAStreamAtOnceCopyEachRowOnceWhileTwoReplicasDispatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 3000
	f.insert(t, "orders", n)
	must(t, execOK(f, `UPDATE `+f.pg.Table.Qualified()+` SET status = 'delivered', published_at = now()`))
	// A broker that refuses every seventh message's first attempt.
	pub := newFakePublisher(func(_ context.Context, m router.Message) error {
		if m.ID%7 == 0 && m.Attempts == 0 {
			return router.Retryable(errors.New("not enough replicas"))
		}
		return nil
	})
	for _, owner := range []string{"replica-a", "replica-b"} {
		run(t, pipeline(t, f, dispatch.PipelineConfig{Owner: owner, BackoffInitial: 10 * time.Millisecond, BatchSize: 50}, pub, newRecorder()))
	}
	o := ops.New(f.store, nil)
	var wg sync.WaitGroup
	results := make([]ops.ReplayResult, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders"}, ops.ReplayOptions{})
		})
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || results[i].ID != results[0].ID || results[i].State != "done" {
			t.Fatalf("replay %d: %+v %v; want both to run replay %d to its end", i, results[i], errs[i], results[0].ID)
		}
	}
	waitFor(t, time.Minute, "every copy delivered", func() bool { return f.counts(t)["delivered"] == 2*n })
	f.replayedOnce(t, n)
}

func execOK(f *fixture, sql string) error {
	_, err := f.pg.Pool.Exec(f.ctx, sql)
	return err
}

func TestAReplaysSizeAndProgressAreSampledIntoItsStreamsSeries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 2500)
	must(t, execOK(f, `UPDATE `+f.pg.Table.Qualified()+` SET status = 'delivered', published_at = now()`))
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, map[string]string{"orders": "bus", "payments": "bus"}, map[string]string{"bus": "nats"}, metrics.BuildInfo{})
	sampler := dispatch.NewSampler(dispatch.SamplerConfig{Interval: time.Hour,
		Probes: []dispatch.Probe{dispatch.ReplayProbe([]string{"orders", "payments"}, f.store)}}, emitters{m.Handle}, nil)
	want := func(running, remaining, copied float64) {
		t.Helper()
		must(t, sampler.Sample(f.ctx))
		for _, c := range []struct {
			name string
			got  float64
			want float64
		}{
			{"running", sampled(t, reg, "outboxd_replays_running"), running},
			{"remaining", sampled(t, reg, "outboxd_replay_remaining_messages"), remaining},
			{"copied", sampled(t, reg, "outboxd_replay_messages_total"), copied},
		} {
			if c.got != c.want {
				t.Fatalf("%s of orders = %v, want %v", c.name, c.got, c.want)
			}
		}
	}
	want(0, 0, 0)
	id, _, err := f.store.StartReplay(f.ctx, storeFilter("orders"), "test")
	must(t, err)
	want(1, 2500, 0)
	_, err = f.store.ReplayChunk(f.ctx, id, 1000)
	must(t, err)
	want(1, 1500, 1000)
	res, err := ops.New(f.store, nil).Replay(f.ctx, ops.ReplayRequest{Resume: id}, ops.ReplayOptions{})
	if err != nil || res.State != "done" {
		t.Fatalf("resume: %+v %v", res, err)
	}
	want(0, 0, 2500)
}

// sampled is the value of the orders series of the family name in reg.
func sampled(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	must(t, err)
	for _, mf := range families {
		for _, s := range mf.GetMetric() {
			if mf.GetName() == name && s.GetLabel()[0].GetValue() == "orders" {
				return s.GetGauge().GetValue() + s.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{stream=orders}", name)
	return 0
}

func storeFilter(stream string) store.ReplayFilter { return store.ReplayFilter{Stream: stream} }
