package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

// flowRelease is a pipeline of "orders" made to flow: a producer inserts a row and counts
// a notification (Wake) every few milliseconds, above the pipeline's flow rate of one a
// second, until the test ends.
type flowRelease struct {
	f    *fixture
	p    *dispatch.Pipeline
	rec  *recorder
	pub  *fakePublisher
	stop func()
	// quiet stops the producer; later calls do nothing.
	quiet func()
}

func startFlowing(t *testing.T, cfg dispatch.PipelineConfig, pub *fakePublisher) *flowRelease {
	t.Helper()
	f := setup(t)
	cfg.FlowRate = 1
	rec := newRecorder()
	p := pipeline(t, f, cfg, pub, rec)
	stop := run(t, p)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(f.ctx, time.Second)
			_, _ = f.pg.Pool.Exec(ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload) VALUES ('orders', 'events', 'x')`)
			cancel()
			p.Wake()
		}
	}()
	var once sync.Once
	quiet := func() { once.Do(func() { close(done); wg.Wait() }) }
	// The producer stops before the pipeline does (cleanups run last in, first out).
	t.Cleanup(quiet)
	rec.await(t, 10*time.Second, "the pipeline to start flowing", func(e events.Event) bool {
		c, ok := e.(events.FlowChanged)
		return ok && c.Flowing
	})
	if n := f.flowHolders(t, "orders"); n != 1 {
		t.Fatalf("flowing, yet %d sessions hold the flow lock; want 1", n)
	}
	return &flowRelease{f: f, p: p, rec: rec, pub: pub, stop: stop, quiet: quiet}
}

// awaitReleased fails t unless no session holds the flow lock within bound.
func (r *flowRelease) awaitReleased(t *testing.T, bound time.Duration, when string) {
	t.Helper()
	waitFor(t, bound, "the flow lock released "+when, func() bool { return r.f.flowHolders(t, "orders") == 0 })
}

func TestTheFlowLockIsReleasedWhenTheBreakerOpensAndNotTakenWhileItIsOpen(t *testing.T) {
	t.Parallel()
	pub := newFakePublisher(nil)
	r := startFlowing(t, dispatch.PipelineConfig{BatchSize: 20, PollInterval: time.Minute,
		BreakerThreshold: 1, BreakerPause: 100 * time.Millisecond, BreakerMaxPause: 200 * time.Millisecond}, pub)

	// The broker goes away: the breaker opens and its trial claims, every 100–200 ms, each
	// find a row. Polling every millisecond is over, and so must the flow be.
	pub.setOutcome(func(context.Context, router.Message) error {
		return router.Unreachable(errors.New("dial tcp 127.0.0.1:9092: connection refused"))
	})
	r.rec.await(t, 10*time.Second, "the breaker to open", func(e events.Event) bool {
		c, ok := e.(events.BreakerChanged)
		return ok && c.To == events.BreakerOpen
	})
	r.awaitReleased(t, 2*time.Second, "once the breaker opened")
	// Half-open trials claim and find rows while producers notify fast: no new flow.
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := r.f.flowHolders(t, "orders"); n != 0 {
			t.Fatalf("the breaker is open (trials only), yet %d sessions hold the flow lock", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTheFlowLockIsReleasedWhenShutdownBeginsNotWhenInFlightWorkEnds(t *testing.T) {
	t.Parallel()
	pub := newFakePublisher(nil)
	r := startFlowing(t, dispatch.PipelineConfig{BatchSize: 20, PollInterval: time.Minute, ShutdownGrace: time.Minute}, pub)

	// Every publish from now on hangs until the test lets it go.
	held, release := make(chan struct{}, 1000), make(chan struct{})
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	t.Cleanup(let) // runs before the pipeline's stop, should the test fail early
	pub.setOutcome(func(context.Context, router.Message) error {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
		return nil
	})
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no publish began")
	}
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	r.awaitReleased(t, 2*time.Second, "once shutdown began, while a publish is in flight")
	select {
	case <-stopped:
		t.Fatal("the pipeline stopped before its in-flight publish ended")
	default:
	}
	let()
	<-stopped
}

func TestTheFlowLockIsReleasedWhenAClaimFailsAndAStalledClaimHasADeadline(t *testing.T) {
	t.Parallel()
	pub := newFakePublisher(nil)
	// A claim's deadline is the lease less the publish timeout: 300 ms here.
	// Rows the janitor hands back send no notification: the poll finds them.
	r := startFlowing(t, dispatch.PipelineConfig{BatchSize: 20, PollInterval: 100 * time.Millisecond,
		LeaseTTL: 500 * time.Millisecond, PublishTimeout: 200 * time.Millisecond}, pub)

	// Another session locks the table: every claim waits, as on a stalled database path.
	tx, err := r.f.pg.Pool.Begin(r.f.ctx)
	must(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.f.ctx)) }()
	_, err = tx.Exec(r.f.ctx, `LOCK TABLE `+r.f.pg.Table.Qualified()+` IN ACCESS EXCLUSIVE MODE`)
	must(t, err)
	r.awaitReleased(t, 10*time.Second, "once a claim failed")
	// The batches in flight may be stuck writing back first (their lease, then a last try
	// of lastWriteTimeout, 10 s): the flow is parked meanwhile (above), and the next claim,
	// once a slot is free, fails at its deadline.
	r.rec.await(t, 20*time.Second, "a failed claim reported", func(e events.Event) bool {
		_, ok := e.(events.ClaimFailed)
		return ok
	})
	must(t, tx.Rollback(r.f.ctx))
	r.quiet()

	// The claim abandoned at its deadline may have leased rows; the lease expiry hands them
	// back, and the pipeline, whose connection was discarded rather than reused
	// mid-statement, claims and delivers everything.
	waitFor(t, 20*time.Second, "every row delivered after the stall", func() bool {
		_, err := r.f.store.Reclaim(r.f.ctx, 1000)
		must(t, err)
		c := r.f.counts(t)
		return c["pending"] == 0 && c["leased"] == 0 && c["delivered"] > 0
	})
}

func TestTheFlowLockIsReleasedWhenEveryBatchSlotStaysBusy(t *testing.T) {
	t.Parallel()
	pub := newFakePublisher(nil)
	r := startFlowing(t, dispatch.PipelineConfig{BatchSize: 20, PollInterval: time.Minute, Concurrency: 2,
		PublishTimeout: time.Minute, LeaseTTL: 5 * time.Minute}, pub)

	// Every publish from now on hangs until the test lets it go: both batch slots stay
	// busy and the pipeline claims nothing, so it must not keep producers from notifying.
	release := make(chan struct{})
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	t.Cleanup(let)
	pub.setOutcome(func(context.Context, router.Message) error {
		<-release
		return nil
	})
	r.awaitReleased(t, 3*time.Second, "while every batch slot stays busy")
	let()
	r.quiet()
	waitFor(t, 20*time.Second, "every row delivered once the publishes end", func() bool {
		c := r.f.counts(t)
		return c["pending"] == 0 && c["leased"] == 0 && c["delivered"] > 0
	})
}
