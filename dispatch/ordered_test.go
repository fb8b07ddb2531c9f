package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	kafkadriver "github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/store"
)

// faultyDriver puts faults in front of a real broker driver: outages (every message
// unreachable, nothing sent), a call cut short (a random prefix reaches the broker, the
// rest fails, as when a connection drops mid-request), and a replica that stalls after
// publishing for longer than its lease (another replica takes the rows meanwhile).
type faultyDriver struct {
	inner  router.Driver
	down   atomic.Bool
	slow   atomic.Int64 // nanoseconds to stall the next publishes
	rng    *rand.Rand
	rngMu  sync.Mutex
	cutOne int // 1 in cutOne calls is cut short
}

func (d *faultyDriver) Publish(ctx context.Context, msgs []router.Message) []error {
	errs := make([]error, len(msgs))
	if d.down.Load() {
		for i := range errs {
			errs[i] = router.Unreachable(errors.New("injected outage"))
		}
		return errs
	}
	if s := time.Duration(d.slow.Load()); s > 0 {
		// The broker takes the messages, then the replica stalls (a GC pause, SIGSTOP)
		// past its lease before it can write the outcome back.
		errs := d.inner.Publish(ctx, msgs)
		time.Sleep(s)
		return errs
	}
	d.rngMu.Lock()
	cut := -1
	if d.rng.IntN(d.cutOne) == 0 {
		cut = d.rng.IntN(len(msgs))
	}
	d.rngMu.Unlock()
	if cut < 0 {
		return d.inner.Publish(ctx, msgs)
	}
	copy(errs, d.inner.Publish(ctx, msgs[:cut]))
	for i := cut; i < len(msgs); i++ {
		errs[i] = router.Retryable(errors.New("injected: connection lost mid-request"))
	}
	return errs
}

func (d *faultyDriver) Close() error { return d.inner.Close() }

// crashable is a replica's view of the database that can die: after crash, every claim
// and write-back fails, so its leases stay behind until they expire and are reclaimed,
// as after kill -9.
type crashable struct {
	*store.Store
	dead atomic.Bool
}

var errCrashed = errors.New("replica crashed")

func (c *crashable) Claim(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, from store.Position) (store.Claim, error) {
	if c.dead.Load() {
		return store.Claim{}, errCrashed
	}
	return c.Store.Claim(ctx, stream, limit, owner, ttl, from)
}

func (c *crashable) ClaimOrdered(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, cur *store.KeyCursor) (store.Claim, error) {
	if c.dead.Load() {
		return store.Claim{}, errCrashed
	}
	return c.Store.ClaimOrdered(ctx, stream, limit, owner, ttl, cur)
}

func (c *crashable) Ack(ctx context.Context, t store.Token, ids []int64) (store.AckResult, error) {
	if c.dead.Load() {
		return store.AckResult{}, errCrashed
	}
	return c.Store.Ack(ctx, t, ids)
}

func (c *crashable) AckAgain(ctx context.Context, t store.Token, owner string, leaseUntil time.Time, ids []int64) (store.AckResult, error) {
	if c.dead.Load() {
		return store.AckResult{}, errCrashed
	}
	return c.Store.AckAgain(ctx, t, owner, leaseUntil, ids)
}

func (c *crashable) Retry(ctx context.Context, t store.Token, r []store.Retry) (store.WriteResult, error) {
	if c.dead.Load() {
		return store.WriteResult{}, errCrashed
	}
	return c.Store.Retry(ctx, t, r)
}

func (c *crashable) Defer(ctx context.Context, t store.Token, d []store.Deferral, maxDefer time.Duration) (store.DeferResult, error) {
	if c.dead.Load() {
		return store.DeferResult{}, errCrashed
	}
	return c.Store.Defer(ctx, t, d, maxDefer)
}

func (c *crashable) Fail(ctx context.Context, t store.Token, f []store.Failure) (store.FailResult, error) {
	if c.dead.Load() {
		return store.FailResult{}, errCrashed
	}
	return c.Store.Fail(ctx, t, f)
}

func (c *crashable) Release(ctx context.Context, t store.Token, ids []int64) (store.WriteResult, error) {
	if c.dead.Load() {
		return store.WriteResult{}, errCrashed
	}
	return c.Store.Release(ctx, t, ids)
}

// orderCounter sums what the pipelines report.
type orderCounter struct {
	violations, heldBack, conflicts atomic.Int64
}

func (c *orderCounter) Emit(e events.Event) {
	if it, ok := e.(events.Iteration); ok {
		c.violations.Add(int64(it.OrderViolations))
		c.heldBack.Add(int64(it.HeldBack))
		c.conflicts.Add(int64(it.LeaseConflicts))
	}
}

// TestOrderedStreamDeliversEveryKeyInOrderThroughCrashesOutagesAndExpiredLeases runs three
// replicas of an ordered stream into a real Kafka-protocol broker while one replica
// crashes (its leases expire and are reclaimed), the broker is out, publishes stall past
// the lease and calls are cut short. Then it reads the topic back: every committed
// message arrived, and along each key the first arrivals are in id order.
func TestOrderedStreamDeliversEveryKeyInOrderThroughCrashesOutagesAndExpiredLeases(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const topic, partitions = "ordered", 4
	k := testenv.NewKafka(t, partitions, topic)
	inner, err := kafkadriver.New("k", kafkadriver.Options{Brokers: []string{k.Addr()}}, nil)
	must(t, err)
	drv := &faultyDriver{inner: inner, rng: rand.New(rand.NewPCG(7, 7)), cutOne: 15}
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "k", Driver: drv}})
	must(t, err)
	t.Cleanup(func() { _ = drv.Close() })
	pub, err := rt.Publisher("orders")
	must(t, err)

	const total, keys = 6000, 150
	if _, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT 'orders', $3, 'k' || (g * 7919 % $2), convert_to('m' || g, 'UTF8') FROM generate_series(1, $1) g`,
		total, keys, topic); err != nil {
		t.Fatal(err)
	}

	counter := &orderCounter{}
	cfg := dispatch.PipelineConfig{
		Stream: "orders", Ordered: true, BatchSize: 50, LeaseTTL: 700 * time.Millisecond,
		PublishTimeout: 600 * time.Millisecond, BackoffInitial: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		MaxAttempts: 1000, BreakerPause: 20 * time.Millisecond, BreakerMaxPause: 100 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second,
	}
	replicas := make([]*crashable, 3)
	for i := range replicas {
		replicas[i] = &crashable{Store: f.store}
		c := cfg
		c.Owner = "replica-" + strconv.Itoa(i)
		p, err := dispatch.NewPipeline(c, replicas[i], pub, counter, nil)
		must(t, err)
		run(t, p)
	}
	// The janitor's part: expired leases go back to pending.
	reclaim, stopReclaim := context.WithCancel(f.ctx)
	defer stopReclaim()
	go func() {
		for reclaim.Err() == nil {
			_, _ = f.store.Reclaim(reclaim, 1000)
			time.Sleep(50 * time.Millisecond)
		}
	}()

	delivered := func() int {
		var n int
		must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE status = 'delivered'`).Scan(&n))
		return n
	}
	// Faults in turn, each once the drain has moved on since the last.
	waitFor(t, time.Minute, "a first tenth delivered", func() bool { return delivered() >= total/10 })
	replicas[0].dead.Store(true) // crash: its leases stay until they expire
	waitFor(t, time.Minute, "a third delivered", func() bool { return delivered() >= total/3 })
	drv.down.Store(true)
	time.Sleep(300 * time.Millisecond) // the outage lasts a while; nothing to await
	drv.down.Store(false)
	waitFor(t, time.Minute, "half delivered", func() bool { return delivered() >= total/2 })
	drv.slow.Store(int64(900 * time.Millisecond)) // longer than the lease
	waitFor(t, time.Minute, "a lease conflict", func() bool { return counter.conflicts.Load() > 0 })
	drv.slow.Store(0)
	waitFor(t, 2*time.Minute, "every message delivered", func() bool { return delivered() == total })

	// Read the topic back and check first arrivals per key.
	firstSeen := map[int64]bool{}
	lastFirst := map[string]int64{}
	copies := 0
	for p := 0; p < partitions; p++ {
		end, err := kafkaEnd(f.ctx, k.Addr(), topic, p)
		must(t, err)
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.Addr()}, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
		for off := int64(0); off < end; off++ {
			m, err := r.ReadMessage(f.ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d at %d: %v", topic, p, off, err)
			}
			copies++
			id, _ := strconv.ParseInt(kafkaHeader(m, router.HeaderID), 10, 64)
			if firstSeen[id] {
				continue
			}
			firstSeen[id] = true
			key := string(m.Key)
			if prev, ok := lastFirst[key]; ok && id < prev {
				t.Errorf("key %s: message %d arrived first after its successor %d", key, id, prev)
			}
			lastFirst[key] = id
		}
		r.Close()
	}
	if len(firstSeen) != total {
		t.Fatalf("%d distinct messages at the broker, want %d", len(firstSeen), total)
	}
	if v := counter.violations.Load(); v != 0 {
		t.Fatalf("pipelines reported %d order violations", v)
	}
	t.Logf("%d messages over %d keys: %d copies at the broker (%d duplicates), %d held back, %d lease conflicts",
		total, keys, copies, copies-total, counter.heldBack.Load(), counter.conflicts.Load())
}

func kafkaEnd(ctx context.Context, addr, topic string, partition int) (int64, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", addr, topic, partition)
	if err != nil {
		return 0, fmt.Errorf("dial %s/%d: %w", topic, partition, err)
	}
	defer conn.Close()
	return conn.ReadLastOffset()
}

func kafkaHeader(m kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}
