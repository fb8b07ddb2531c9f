package metrics_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/events/metrics"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/natsconn"
	"github.com/outboxd/outboxd/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Topics the load uses to make things happen on the orders stream.
const (
	topicStall = "stall" // published only after its lease was reclaimed: a lease conflict
	topicFlaky = "flaky" // refused by the broker every time: retried, then attempts_exhausted
)

// dispatcher is outboxd's moving parts on real PostgreSQL and real NATS, wired to one
// bus the way the binary wires them, with metrics subscribed. Four streams:
//
//   - orders → driver "events" (a NATS server that is up), where the load goes;
//   - audit  → driver "events", idle: its series must exist at zero;
//   - ledger → driver "offline" (a NATS server that is down): deferrals, max_defer
//     failures, a paused stream, and dead-letter forwards that keep being retried;
//   - sequence → driver "events", ordered: a key whose first message the broker
//     refuses for good, so the rest of the key is held back and the key blocked.
type dispatcher struct {
	pg       *testenv.PG
	bus      *events.Bus
	metrics  *metrics.Metrics
	probe    *probe
	listener *dispatch.Listener
	run      []func(context.Context) error
}

var (
	testStreams = map[string]string{"orders": "events", "audit": "events", "ledger": "offline", "sequence": "events"}
	testDrivers = map[string]string{"events": nats.Type, "offline": nats.Type}
)

func newDispatcher(t *testing.T, reg prometheus.Registerer) *dispatcher {
	t.Helper()
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table) // delivered rows are kept, so the janitor purges
	if err != nil {
		t.Fatal(err)
	}
	up := testenv.NewNATS(t)
	down := testenv.NewNATS(t)
	downURL := down.URL()
	down.Stop()
	online, err := nats.New("events", nats.Options{Options: natsconn.Options{URL: up.URL()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	offline, err := nats.New("offline", nats.Options{Options: natsconn.Options{URL: downURL}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New([]router.Route{
		{Stream: "orders", DriverName: "events", Driver: online},
		{Stream: "audit", DriverName: "events", Driver: online},
		{Stream: "ledger", DriverName: "offline", Driver: offline},
		{Stream: "sequence", DriverName: "events", Driver: online},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = online.Close(), offline.Close() })
	publisher := func(stream string) *router.Publisher {
		p, err := r.Publisher(stream)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	d := &dispatcher{pg: pg, bus: events.NewBus(nil), probe: newProbe()}
	d.metrics = metrics.New(reg, testStreams, testDrivers, metrics.BuildInfo{Version: "test"})
	d.bus.Subscribe("metrics", d.metrics.Handle)
	d.bus.Subscribe("probe", d.probe.handle)
	fwd := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{
		{Stream: "orders", Topic: "dlq.orders", Publisher: publisher("orders")},
		{Stream: "ledger", Topic: "dlq.ledger", Publisher: publisher("ledger")},
	}, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, PublishTimeout: time.Second}, d.bus, nil)
	d.bus.SubscribeAsync("deadletter", 256, fwd.Handle, events.Filter(fwd.Wants))
	d.metrics.ObserveBus(d.bus, "metrics", "probe", "deadletter")
	t.Cleanup(func() {
		fwd.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.bus.Close(ctx); err != nil {
			t.Error(err)
		}
	})

	orders := pipeline(t, dispatch.PipelineConfig{
		Stream: "orders", BatchSize: 100, Concurrency: 2, PollInterval: 200 * time.Millisecond,
		LeaseTTL: 600 * time.Millisecond, PublishTimeout: 500 * time.Millisecond,
		BackoffInitial: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, MaxAttempts: 2,
	}, st, &stallingPublisher{inner: publisher("orders"), token: leaseToken(pg), stalled: map[int64]bool{}}, d.bus)
	audit := pipeline(t, dispatch.PipelineConfig{Stream: "audit", PollInterval: 200 * time.Millisecond}, st, publisher("audit"), d.bus)
	ledger := pipeline(t, dispatch.PipelineConfig{
		Stream: "ledger", BatchSize: 10, PollInterval: 100 * time.Millisecond,
		LeaseTTL: 2 * time.Second, PublishTimeout: time.Second, MaxDefer: 300 * time.Millisecond,
		BreakerThreshold: 1, BreakerPause: 200 * time.Millisecond, BreakerMaxPause: 400 * time.Millisecond,
	}, st, publisher("ledger"), d.bus)
	sequence := pipeline(t, dispatch.PipelineConfig{Stream: "sequence", Ordered: true, PollInterval: 100 * time.Millisecond},
		st, publisher("sequence"), d.bus)

	connConfig, err := pgx.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	d.listener = dispatch.NewListener(dispatch.ListenerConfig{Listen: store.ListenConfig{Conn: connConfig, Table: pg.Table}}, []dispatch.Waker{orders, audit, ledger, sequence}, d.bus, nil)
	d.metrics.ObserveListener(d.listener)
	janitor := dispatch.NewJanitor(dispatch.JanitorConfig{Interval: 100 * time.Millisecond}, st, d.bus, nil)
	sampler := dispatch.NewSampler(dispatch.SamplerConfig{Interval: 200 * time.Millisecond, Probes: []dispatch.Probe{
		dispatch.BacklogProbe([]string{"audit", "ledger", "orders", "sequence"}, st),
		dispatch.BlockedProbe([]string{"sequence"}, st),
	}}, d.bus, nil)
	d.run = []func(context.Context) error{orders.Run, audit.Run, ledger.Run, sequence.Run, d.listener.Run, janitor.Run,
		sampler.Run}
	return d
}

func pipeline(t *testing.T, cfg dispatch.PipelineConfig, st *store.Store, pub dispatch.Publisher, bus *events.Bus) *dispatch.Pipeline {
	t.Helper()
	cfg.Owner = "metrics-test"
	cfg.ShutdownGrace = 2 * time.Second
	p, err := dispatch.NewPipeline(cfg, st, pub, bus, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs every loop until t ends.
func (d *dispatcher) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range d.run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = run(ctx)
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the bus closes (cleanups run last first)
}

// insert commits n rows of stream and topic, with payloads of size bytes.
func (d *dispatcher) insert(t *testing.T, ctx context.Context, stream, topic string, n, size int) {
	t.Helper()
	_, err := d.pg.Pool.Exec(ctx, `INSERT INTO `+d.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT $1, $2, 'k' || (g % 7), convert_to(repeat('x', $4) || g, 'UTF8') FROM generate_series(1, $3) g`,
		stream, topic, n, size)
	if err != nil {
		t.Fatal(err)
	}
}

// insertExpired commits n rows of stream whose expires_at has passed: the sweep before
// the next claim marks them expired instead of publishing them.
func (d *dispatcher) insertExpired(t *testing.T, ctx context.Context, stream string, n int) {
	t.Helper()
	_, err := d.pg.Pool.Exec(ctx, `INSERT INTO `+d.pg.Table.Qualified()+` (stream, topic, payload, expires_at)
		SELECT $1, $1 || '.late', convert_to('late ' || g, 'UTF8'), statement_timestamp() - interval '1 second'
		FROM generate_series(1, $2) g`, stream, n)
	if err != nil {
		t.Fatal(err)
	}
}

// insertBlockedKey commits, in one statement so their ids are in this order, a message
// of key "stuck" larger than NATS' max_payload (refused for good before it is sent)
// followed by n ordinary messages of the same key.
func (d *dispatcher) insertBlockedKey(t *testing.T, ctx context.Context, stream string, n int) {
	t.Helper()
	_, err := d.pg.Pool.Exec(ctx, `INSERT INTO `+d.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT $1, $1 || '.changed', 'stuck', convert_to(repeat('x', CASE WHEN g = 0 THEN 2 << 20 ELSE 10 END), 'UTF8')
		FROM generate_series(0, $2) g ORDER BY g`, stream, n)
	if err != nil {
		t.Fatal(err)
	}
}

// stallingPublisher publishes through the real driver, except that a batch holding a
// message of topic stall (the first time that message is claimed) waits until the
// janitor reclaimed its expired lease before it publishes: its write-back then finds
// the lease moved on. Messages of topic flaky are refused every time.
type stallingPublisher struct {
	inner dispatch.Publisher
	token func(ctx context.Context, id int64) (string, error) // the row's lease token, "" for none

	mu      sync.Mutex
	stalled map[int64]bool
}

func (p *stallingPublisher) Publish(ctx context.Context, msgs []router.Message) []error {
	stall, id := false, int64(0)
	p.mu.Lock()
	for _, m := range msgs {
		if m.Topic == topicStall && !p.stalled[m.ID] {
			p.stalled[m.ID], stall, id = true, true, m.ID
		}
	}
	p.mu.Unlock()
	if stall {
		// Until the row's lease token changes: the janitor took this very lease back. (Any
		// reclaim was not enough: on a loaded machine other batches' leases ran out first,
		// the stalled batch published in time, and no lease conflict came.)
		ctx = context.WithoutCancel(ctx) // a broker that answers late, after the lease
		claimed, err := p.token(ctx, id)
		for deadline := time.Now().Add(10 * time.Second); err == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if now, err := p.token(ctx, id); err != nil || now != claimed {
				break // never reclaimed: the test's wait reports it
			}
		}
	}
	errs := p.inner.Publish(ctx, msgs)
	for i, m := range msgs {
		if m.Topic == topicFlaky && errs[i] == nil {
			errs[i] = router.Retryable(errors.New("broker refused: flaky by design"))
		}
	}
	return errs
}

// leaseToken reads a row's lease token ("" when it has none) from pg's table.
func leaseToken(pg *testenv.PG) func(ctx context.Context, id int64) (string, error) {
	return func(ctx context.Context, id int64) (string, error) {
		var token string
		err := pg.Pool.QueryRow(ctx, `SELECT coalesce(lease_token::text, '') FROM `+pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&token)
		return token, err
	}
}

// probe follows the events the load must produce, so the test waits for them instead
// of for time.
type probe struct {
	mu               sync.Mutex
	published        map[string]int
	failed           map[string]int // by reason
	leaseConflicts   int
	reclaimedRows    int
	deadLetter       map[events.DeadLetterResult]int
	breakerOpened    map[string]bool
	retentionDeleted int64
	heldBack         map[string]int
	expired          map[string]int
	blocked          map[string]events.BlockedKeys // the last sample per stream
	backlog          map[string]events.Backlog     // the last sample per stream

	changed chan struct{} // a non-blocking nudge after every event
}

func newProbe() *probe {
	return &probe{
		published: map[string]int{}, failed: map[string]int{}, deadLetter: map[events.DeadLetterResult]int{},
		breakerOpened: map[string]bool{}, heldBack: map[string]int{}, expired: map[string]int{}, blocked: map[string]events.BlockedKeys{},
		backlog: map[string]events.Backlog{}, changed: make(chan struct{}, 1),
	}
}

func (p *probe) handle(e events.Event) {
	p.mu.Lock()
	switch e := e.(type) {
	case events.Iteration:
		p.published[e.Stream] += e.Published
		for r, n := range e.FailReasons {
			p.failed[r] += n
		}
		p.leaseConflicts += e.LeaseConflicts
		p.heldBack[e.Stream] += e.HeldBack
	case events.BlockedKeys:
		p.blocked[e.Stream] = e
	case events.Backlog:
		p.backlog[e.Stream] = e
	case events.LeasesReclaimed:
		p.reclaimedRows += e.Count
	case events.DeadLetterForwarded:
		p.deadLetter[e.Result]++
	case events.BreakerChanged:
		if e.To == events.BreakerOpen {
			p.breakerOpened[e.Stream] = true
		}
	case events.RetentionSwept:
		p.retentionDeleted += e.Deleted
	case events.MessageExpired:
		p.expired[e.Stream]++
	}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// await waits until cond holds on the probe's state, failing t after timeout with the
// state it saw.
func (p *probe) await(t *testing.T, timeout time.Duration, what string, cond func(*probe) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		ok := cond(p)
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-p.changed:
		case <-deadline.C:
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("timed out after %v waiting for %s; saw published %v, failed %v, lease conflicts %d, reclaimed %d, "+
				"dead letters %v, breakers opened %v, retention deleted %d, held back %v, blocked %v, backlog %v", timeout, what, p.published, p.failed,
				p.leaseConflicts, p.reclaimedRows, p.deadLetter, p.breakerOpened, p.retentionDeleted, p.heldBack, p.blocked, p.backlog)
		}
	}
}
