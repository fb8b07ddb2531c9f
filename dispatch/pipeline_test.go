package dispatch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

func TestThreeDispatchersWithInjectedFailuresDeliverEveryRow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 6000
	ids := f.insert(t, "orders", total)

	// Each replica has its own broker connection that fails now and then: refusals
	// (retryable), an unreachable broker, and publishes slower than others.
	var wg sync.WaitGroup
	pubs := make([]*fakePublisher, 3)
	for r := range pubs {
		rng := rand.New(rand.NewPCG(uint64(r), 42))
		var rmu sync.Mutex
		pubs[r] = newFakePublisher(func(ctx context.Context, m router.Message) error {
			rmu.Lock()
			x := rng.IntN(100)
			rmu.Unlock()
			switch {
			case x < 8:
				return router.Retryable(errRefused)
			case x < 12:
				return router.Unreachable(fmt.Errorf("dial tcp: connection refused"))
			}
			return nil
		})
		p := pipeline(t, f, dispatch.PipelineConfig{
			Owner: fmt.Sprintf("replica-%d", r), BatchSize: 50, Concurrency: 2,
			BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 100,
			BreakerPause: 5 * time.Millisecond, BreakerMaxPause: 20 * time.Millisecond,
		}, pubs[r], nil)
		wg.Add(1)
		stop := run(t, p)
		defer func() { stop(); wg.Done() }()
	}
	waitFor(t, 2*time.Minute, "every row delivered", func() bool { return f.counts(t)["delivered"] == total })

	confirmed := confirmedBy(pubs)
	for _, id := range ids {
		if confirmed[id] == 0 {
			t.Fatalf("row %d is delivered in the table but no broker confirmed it", id)
		}
	}
	if len(confirmed) != total {
		t.Fatalf("brokers confirmed %d distinct ids, inserted %d", len(confirmed), total)
	}
	var attempts int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(max(attempts), 0) FROM `+f.pg.Table.Qualified()).Scan(&attempts))
	if attempts == 0 {
		t.Fatal("no refusal spent an attempt: the injected failures did not happen")
	}
}

func TestAPermanentRefusalFailsAtOnceWhileTheRestOfItsBatchIsDelivered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := f.insert(t, "orders", 20)
	bad := ids[7]
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
		if m.ID == bad {
			return router.Permanent(fmt.Errorf("message of 2000000 bytes exceeds the broker's limit of 1048576"))
		}
		return nil
	})
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{BatchSize: 20}, pub, rec))
	it := rec.await(t, 30*time.Second, "the batch's iteration", func(e events.Event) bool {
		it, ok := e.(events.Iteration)
		return ok && it.Claimed > 0
	}).(events.Iteration)
	if it.Published != 19 || it.Failed != 1 || it.FailReasons["permanent"] != 1 || it.Retried != 0 {
		t.Fatalf("iteration: %+v", it)
	}
	var status, lastError string
	var attempts int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT status, last_error, attempts FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, bad).Scan(&status, &lastError, &attempts))
	if status != "failed" || attempts != 1 || !strings.Contains(lastError, "exceeds the broker's limit") {
		t.Fatalf("refused row: status %s attempts %d last_error %q", status, attempts, lastError)
	}
	if c := f.counts(t); c["delivered"] != 19 {
		t.Fatalf("rows by status: %v", c)
	}
}

func TestRefusalsSpendAttemptsWithBackoffAndEndInFailed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 1)
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error { return router.Retryable(errRefused) })
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{MaxAttempts: 4, BackoffInitial: 40 * time.Millisecond, BackoffMax: time.Second}, pub, rec))

	// Three retries, then the fourth refusal fails the row.
	var retriedAt []time.Time
	for len(retriedAt) < 3 {
		rec.await(t, 30*time.Second, "a retry", func(e events.Event) bool {
			it, ok := e.(events.Iteration)
			return ok && it.Retried == 1
		})
		retriedAt = append(retriedAt, time.Now())
	}
	rec.await(t, 30*time.Second, "the final failure", func(e events.Event) bool {
		it, ok := e.(events.Iteration)
		return ok && it.Failed == 1 && it.FailReasons["attempts_exhausted"] == 1
	})
	// Backoff doubles from 40ms with at most half cut off by jitter: the gaps between
	// retries are at least 40ms and 80ms (the second gap), never immediate.
	if gap := retriedAt[2].Sub(retriedAt[1]); gap < 40*time.Millisecond {
		t.Fatalf("retries 2 and 3 were %v apart; backoff not honoured", gap)
	}
	var status, lastError string
	var attempts int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT status, last_error, attempts FROM `+f.pg.Table.Qualified()).Scan(&status, &lastError, &attempts))
	if status != "failed" || attempts != 4 || !strings.Contains(lastError, "gave up after 4 attempts") || !strings.Contains(lastError, "not enough replicas") {
		t.Fatalf("row after max attempts: %s attempts=%d %q", status, attempts, lastError)
	}
}

func TestAnUnreachableBrokerDefersWithoutSpendingAttemptsAndOpensTheBreaker(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 30)
	down := func(ctx context.Context, m router.Message) error {
		return router.Unreachable(fmt.Errorf("dial tcp 127.0.0.1:4222: connection refused"))
	}
	pub := newFakePublisher(down)
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{BatchSize: 10, BreakerThreshold: 2, BreakerPause: 30 * time.Millisecond, BreakerMaxPause: 100 * time.Millisecond}, pub, rec))

	rec.await(t, 30*time.Second, "the breaker opening", func(e events.Event) bool {
		c, ok := e.(events.BreakerChanged)
		return ok && c.To == events.BreakerOpen
	})
	// A half-open trial of one message fails and reopens it with a longer pause.
	rec.await(t, 30*time.Second, "a failed trial", func(e events.Event) bool {
		c, ok := e.(events.BreakerChanged)
		return ok && c.From == events.BreakerHalfOpen && c.To == events.BreakerOpen && c.Pause == 60*time.Millisecond
	})
	var attempts, deferred int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(sum(attempts), 0), count(*) FILTER (WHERE deferred_since IS NOT NULL) FROM `+f.pg.Table.Qualified()).Scan(&attempts, &deferred))
	if attempts != 0 || deferred == 0 {
		t.Fatalf("while the broker is down: %d attempts spent, %d rows deferred", attempts, deferred)
	}
	for _, it := range rec.iterations() {
		if it.Claimed > 10 || (it.Claimed > 1 && it.Deferred == 0) {
			t.Fatalf("unexpected iteration while down: %+v", it)
		}
	}

	pub.setOutcome(nil) // the broker is back
	rec.await(t, 30*time.Second, "the breaker closing", func(e events.Event) bool {
		c, ok := e.(events.BreakerChanged)
		return ok && c.To == events.BreakerClosed
	})
	waitFor(t, 30*time.Second, "every row delivered", func() bool { return f.counts(t)["delivered"] == 30 })
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(sum(attempts), 0), count(*) FILTER (WHERE deferred_since IS NOT NULL) FROM `+f.pg.Table.Qualified()).Scan(&attempts, &deferred))
	if attempts != 0 || deferred != 0 {
		t.Fatalf("after recovery: %d attempts spent, %d rows still marked deferred", attempts, deferred)
	}
}

func TestShutdownReleasesEveryUnpublishedLeaseForAnotherInstance(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 500
	f.insert(t, "orders", total)
	// The first instance's broker hangs until its context ends.
	started := make(chan struct{}, 100)
	hanging := newFakePublisher(func(ctx context.Context, m router.Message) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return router.Canceled(ctx.Err())
	})
	first := pipeline(t, f, dispatch.PipelineConfig{Owner: "first", BatchSize: 50, Concurrency: 3, ShutdownGrace: 50 * time.Millisecond}, hanging, nil)
	stop := run(t, first)
	<-started
	waitFor(t, 30*time.Second, "three batches in flight", func() bool { return f.counts(t)["leased"] == 150 })
	stop()
	if c := f.counts(t); c["leased"] != 0 || c["pending"] != total {
		t.Fatalf("after shutdown: %v; want every row pending and none leased", c)
	}
	var attempts int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+f.pg.Table.Qualified()).Scan(&attempts))
	if attempts != 0 {
		t.Fatalf("a shutdown spent %d attempts", attempts)
	}

	second := newFakePublisher(nil)
	run(t, pipeline(t, f, dispatch.PipelineConfig{Owner: "second", BatchSize: 100}, second, nil))
	waitFor(t, 30*time.Second, "the second instance delivering the rest", func() bool { return f.counts(t)["delivered"] == total })
}

func TestShutdownLetsAPublishInFlightFinishWithinTheGrace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 10)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := newFakePublisher(func(ctx context.Context, m router.Message) error {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return router.Canceled(ctx.Err())
		}
	})
	p := pipeline(t, f, dispatch.PipelineConfig{ShutdownGrace: 20 * time.Second}, slow, nil)
	stop := run(t, p)
	<-started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	close(release) // the broker answers after shutdown began, within the grace
	<-stopped
	if c := f.counts(t); c["delivered"] != 10 {
		t.Fatalf("rows by status after a graceful stop: %v; the in-flight batch should have been acknowledged", c)
	}
}

func TestAWriteBackWithAnExpiredLeaseIsCountedAsALeaseConflict(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := f.insert(t, "orders", 5)
	// While the broker "publishes", the lease is taken over (as reclaiming would).
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
		if m.ID == ids[0] {
			_, err := f.pg.Pool.Exec(ctx, `UPDATE `+f.pg.Table.Qualified()+` SET lease_token = gen_random_uuid() WHERE status = 'leased'`)
			if err != nil {
				return router.Retryable(err)
			}
		}
		return nil
	})
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{}, pub, rec))
	it := rec.await(t, 30*time.Second, "the iteration", func(e events.Event) bool {
		it, ok := e.(events.Iteration)
		return ok && it.Claimed > 0
	}).(events.Iteration)
	if it.LeaseConflicts != 5 || it.Published != 0 {
		t.Fatalf("iteration: %+v", it)
	}
	if c := f.counts(t); c["leased"] != 5 {
		t.Fatalf("a stale write-back changed rows: %v", c)
	}
}

func TestMaxDeferFailsMessagesTheBrokerNeverTookInTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 3)
	must(t, func() error {
		_, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET deferred_since = now() - interval '2 hours'`)
		return err
	}())
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
		return router.Unreachable(fmt.Errorf("no route to host"))
	})
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{MaxDefer: time.Hour}, pub, rec))
	it := rec.await(t, 30*time.Second, "the iteration", func(e events.Event) bool {
		it, ok := e.(events.Iteration)
		return ok && it.Claimed > 0
	}).(events.Iteration)
	if it.Failed != 3 || it.FailReasons["max_defer"] != 3 || it.Deferred != 0 {
		t.Fatalf("iteration: %+v", it)
	}
	if c := f.counts(t); c["failed"] != 3 {
		t.Fatalf("rows: %v", c)
	}
}

func TestPipelineConfigRefusesALeaseShorterThanThePublishTimeout(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := dispatch.NewPipeline(dispatch.PipelineConfig{Stream: "s", Owner: "o", LeaseTTL: time.Second, PublishTimeout: 2 * time.Second}, f.store, newFakePublisher(nil), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "must exceed the publish timeout") {
		t.Fatalf("err = %v", err)
	}
}
