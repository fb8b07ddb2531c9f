package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// Dispatcher is everything `outboxd run` starts: the pool, the router with its
// drivers, one pipeline per stream, the listener, janitor and samplers, and the event
// bus with the dead-letter forwarder.
type Dispatcher struct {
	pool  *pgxpool.Pool
	store *store.Store
	// pipePool and pipeStore serve the pipelines' claims and write-backs, committed
	// without waiting for their WAL flush (pipelineSessions).
	pipePool  *pgxpool.Pool
	pipeStore *store.Store
	// sessionPool holds the session advisory locks on database.listen_url, when set.
	sessionPool *pgxpool.Pool
	router      *router.Router
	drivers     map[string]router.Driver
	pipelines   []*dispatch.Pipeline
	listener    *dispatch.Listener
	poller      *dispatch.Poller
	janitor     *dispatch.Janitor
	sampler     *dispatch.Sampler
	bus         *events.Bus
	deadLetter  *dispatch.DeadLetterForwarder
	failures    *dispatch.FailureLog
	// busSubscribers names the dispatcher's own asynchronous bus subscribers.
	busSubscribers []string
	log            *slog.Logger
}

// Options adjust a dispatcher for callers other than `run` (demo, tests).
type Options struct {
	// Migrate applies pending schema migrations before the schema is checked.
	Migrate bool
	// Subscribe, when set, adds subscribers to the bus before anything emits (metrics,
	// the admin API's breaker board, tests).
	Subscribe func(bus *events.Bus)
	// Middleware decorates every publisher of the router, dead-letter ones included
	// (tracing; the bench and the demo note confirmations).
	Middleware []router.Middleware
	// start, when set, are the connections run opened while waiting for the database,
	// which the dispatcher uses and closes; without them it opens its own.
	start *startConns
	// early, when set, delivers the listening connection run began to open before it
	// waited for the database (listenEarly, for database.listen_url); without it the
	// listener takes a start connection or opens its own.
	early chan *store.Notifications
}

// Store is the store of the dispatcher's general pool (janitor, samplers, admin API).
func (d *Dispatcher) Store() *store.Store { return d.store }

// Driver is the open driver configured under name, nil if none.
func (d *Dispatcher) Driver(name string) router.Driver { return d.drivers[name] }

// Layout is the migration layout the configuration asks for.
func Layout(cfg *config.Config) migrations.Layout {
	if cfg.Janitor.Partitions.Enabled {
		return migrations.Partitioned
	}
	return migrations.Plain
}

// NewDispatcher builds a Dispatcher from a validated configuration. A broker that is
// down does not stop it: drivers connect in the background and only the streams routed
// to a missing broker wait.
func NewDispatcher(ctx context.Context, cfg *config.Config, logger *slog.Logger, opt Options) (_ *Dispatcher, err error) {
	start := opt.start
	defer func() { start.close() }()
	if err := cfg.RequireStreams(); err != nil {
		return nil, err
	}
	n := cfg.Table()
	listen, err := listenConfig(cfg)
	if err != nil {
		return nil, err
	}
	early := opt.early
	if early == nil && listensApart(cfg) {
		early = listenEarly(ctx, listen)
	}
	defer func() {
		if err != nil && early != nil {
			go closeEarly(ctx, early) // the listener never ran: nothing else takes it
		}
	}()
	if start == nil {
		if start, err = openStart(ctx, cfg); err != nil {
			return nil, fmt.Errorf("connect to database: %w", err)
		}
	}
	behind := cfg.Database.Pooler == config.PoolerTransaction
	if cfg.Database.Pooler == config.PoolerAuto {
		if behind, err = store.BehindPoolerOn(ctx, start.first.Conn(), start.second.Conn()); err != nil {
			return nil, fmt.Errorf("connect to database: database_url: %w", err)
		}
	}
	if err := sessionURLProblem(ctx, cfg, behind); err != nil {
		return nil, err
	}
	if opt.Migrate {
		if err := Layout(cfg).Up(ctx, cfg.SessionURL(), n); err != nil {
			return nil, err
		}
	}
	d := &Dispatcher{log: logger, bus: events.NewBus(logger)}
	defer func() {
		if err != nil {
			start.release() // the pool's Close waits for its connections
			d.close()
		}
	}()
	poolConfig, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", config.RedactParseError(err))
	}
	serverSettings(poolConfig, cfg.Database, behind)
	pipeConfig := pipelineSessions(poolConfig, cfg.Database, cfg.Streams, behind)
	d.pool = start.adopt()
	if d.pipePool, err = pgxpool.NewWithConfig(skipFirstFill(ctx, pipeConfig), pipeConfig); err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	opts := append(StoreOptions(cfg.Janitor), TTLOptions(cfg.Streams)...)
	if cfg.Database.ListenURL != "" {
		if d.sessionPool, err = sessionPool(ctx, cfg); err != nil {
			return nil, err
		}
		opts = append(opts, store.WithSessions(d.sessionPool))
	}
	if d.store, err = store.New(d.pool, n, opts...); err != nil {
		return nil, err
	}
	if d.pipeStore, err = store.New(d.pipePool, n, opts...); err != nil {
		return nil, err
	}
	// LISTEN before the first poll, which so finds every row committed before: on the
	// second start connection when the listener would open one like it, beside the
	// schema check on the first; the listener asks the first poll on it (FirstPoll).
	var listening <-chan listened
	if early == nil && !listensApart(cfg) && !behind {
		start.decide(behind)
		listening = start.listenOn(ctx, n)
	}
	// The schema is checked on the first start connection, with the simple protocol (a
	// transaction pooler forwards it); then it goes back into the general pool, where
	// /readyz and the janitor find it open, and the second too unless the listener
	// took it.
	err = checkSchema(ctx, n, cfg.SessionURL(), func(ctx context.Context) (uint, bool, error) {
		return d.store.SchemaVersionOn(ctx, start.first.Conn())
	})
	if err == nil {
		err = start.settle(ctx, behind)
	}
	if listening != nil {
		l := <-listening
		early = l.early // closed by the deferred closeEarly if the start fails
		err = errors.Join(err, l.err)
	}
	if err != nil {
		return nil, err
	}
	earlyPolled := early != nil && listening != nil
	start.release()
	if cfg.Janitor.Partitions.Enabled {
		partitioned, err := d.store.Partitioned(ctx)
		if err != nil {
			return nil, err
		}
		if !partitioned {
			return nil, fmt.Errorf("janitor.partitions.enabled is true but %s is not partitioned: see docs/partitioning.md to convert it", n)
		}
	}

	drivers := map[string]router.Driver{}
	for _, name := range sortedKeys(cfg.Drivers) {
		drv, err := newDriver(name, cfg.Drivers[name], logger) // each driver adds its name
		if err != nil {
			for _, open := range drivers {
				_ = open.Close()
			}
			return nil, err
		}
		drivers[name] = drv
	}
	d.drivers = drivers
	if err := provisionDrivers(ctx, cfg, drivers, logger); err != nil {
		for _, open := range drivers {
			_ = open.Close()
		}
		return nil, err
	}
	var routes []router.Route
	for _, stream := range sortedKeys(cfg.Streams) {
		s := cfg.Streams[stream]
		rt := router.Route{Stream: stream, DriverName: s.Driver, Driver: drivers[s.Driver], TopicPrefix: s.TopicPrefix}
		if dl := s.DeadLetter; dl.Driver != "" {
			rt.DeadLetter = router.DeadLetter{DriverName: dl.Driver, Driver: drivers[dl.Driver]}
		}
		if s.Format == config.FormatCloudEvents {
			ce := s.CloudEvents
			rt.CloudEvents = &router.CloudEvents{Type: ce.Type, Source: ce.Source, SubjectFromKey: ce.SubjectFromKey}
		}
		routes = append(routes, rt)
	}
	if d.router, err = router.New(routes, router.WithMiddleware(opt.Middleware...)); err != nil {
		for _, open := range drivers {
			_ = open.Close()
		}
		return nil, err
	}

	var wakers []dispatch.Waker
	for _, stream := range d.router.Streams() {
		s := cfg.Streams[stream]
		pub, err := d.router.Publisher(stream)
		if err != nil {
			return nil, err
		}
		p, err := dispatch.NewPipeline(pipelineConfig(stream, s, cfg.ReplicaID), d.pipeStore, pub, d.bus,
			logger.With("driver", s.Driver))
		if err != nil {
			return nil, err
		}
		d.pipelines = append(d.pipelines, p)
		wakers = append(wakers, p)
	}
	d.poller = dispatch.NewPoller(sharedPoll(cfg.Streams), d.store, d.pipelines, logger)
	lc := dispatch.ListenerConfig{Listen: listen, Early: early, EarlyPolled: earlyPolled, Connected: d.poller.Kick}
	if earlyPolled {
		d.poller.AwaitPrime()
		lc.FirstPoll = func(ctx context.Context, conn *store.Notifications) {
			pctx, cancel := context.WithTimeout(ctx, dispatch.PrimeTimeout)
			defer cancel()
			d.poller.PrimeWith(d.store.DueStreamsOn(pctx, conn))
		}
	}
	d.listener = dispatch.NewListener(lc, wakers, d.bus, logger)
	j := cfg.Janitor
	jc := dispatch.JanitorConfig{Interval: j.Interval, ReclaimBatch: j.ReclaimBatch, Retention: j.Retention, PurgeBatch: j.PurgeBatch}
	if j.Partitions.Enabled {
		jc.Partitions = dispatch.NewPartitions(dispatch.PartitionsConfig{
			Interval: j.Partitions.Interval, Ahead: j.Partitions.Ahead, Retention: j.Retention}, d.store, logger)
	}
	d.janitor = dispatch.NewJanitor(jc, d.store, d.bus, logger)
	probes := []dispatch.Probe{dispatch.BacklogProbe(d.router.Streams(), d.store),
		dispatch.UnservedProbe(d.router.Streams(), d.store, logger), dispatch.ReplayProbe(d.router.Streams(), d.store)}
	if ordered := orderedStreams(cfg); len(ordered) > 0 {
		probes = append(probes, dispatch.BlockedProbe(ordered, d.store))
	}
	d.sampler = dispatch.NewSampler(dispatch.SamplerConfig{Interval: j.StatsInterval, Probes: probes}, d.bus, logger)

	var dead []dispatch.DeadLetterRoute
	for _, stream := range d.router.Streams() {
		if dl := cfg.Streams[stream].DeadLetter; dl.Driver != "" {
			pub, err := d.router.DeadLetter(stream)
			if err != nil {
				return nil, err
			}
			dead = append(dead, dispatch.DeadLetterRoute{Stream: stream, Topic: dl.Topic, Publisher: pub, Expired: dl.Expired})
		}
	}
	if len(dead) > 0 {
		d.deadLetter = dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: dead}, d.bus, logger)
		// One queue per stream: a dead-letter broker that is down holds back only the
		// dead letters of the streams routed to it.
		for _, route := range dead {
			name := "deadletter-" + route.Stream
			wants := func(e events.Event) bool {
				f, ok := e.(events.MessageFailed)
				return ok && f.Stream == route.Stream
			}
			d.bus.SubscribeAsync(name, 1024, d.deadLetter.Handle, events.Filter(wants))
			d.busSubscribers = append(d.busSubscribers, name)
		}
	}
	// Synchronous, so that every failure is logged or counted in its stream's summary.
	d.failures = dispatch.NewFailureLog(dispatch.FailureLogConfig{}, logger)
	d.bus.Subscribe("failure-log", d.failures.Handle, events.Filter(dispatch.IsMessageFailed))
	if opt.Subscribe != nil {
		opt.Subscribe(d.bus)
	}
	if !earlyPolled {
		d.poller.Prime(ctx)
	}
	return d, nil
}

// orderedStreams names the streams configured ordered, in name order.
func orderedStreams(cfg *config.Config) []string {
	var out []string
	for _, name := range sortedKeys(cfg.Streams) {
		if cfg.Streams[name].Ordered {
			out = append(out, name)
		}
	}
	return out
}

// sharedPoll is the interval of the shared poll: the shortest poll_interval of the
// streams, so that none waits longer than it asked for.
func sharedPoll(streams map[string]config.Stream) time.Duration {
	var d time.Duration
	for _, s := range streams {
		if d == 0 || (s.PollInterval > 0 && s.PollInterval < d) {
			d = s.PollInterval
		}
	}
	if d <= 0 {
		return time.Second
	}
	return d
}

// pipelineConfig maps a stream's settings onto its pipeline.
func pipelineConfig(name string, s config.Stream, replica string) dispatch.PipelineConfig {
	return dispatch.PipelineConfig{
		Stream: name, Owner: replica,
		BatchSize: s.BatchSize, Concurrency: s.Concurrency, PollInterval: s.PollInterval,
		LeaseTTL: s.LeaseTTL, PublishTimeout: s.PublishTimeout,
		BackoffInitial: s.BackoffInitial, BackoffMax: s.BackoffMax,
		MaxAttempts: s.MaxAttempts, MaxDefer: s.MaxDefer, Ordered: s.Ordered, NoFlow: !s.Flow,
		FlowRate: s.FlowRate, Transaction: s.ClaimInTransaction(), Polled: true,
	}
}

func newDriver(name string, d config.Driver, logger *slog.Logger) (router.Driver, error) {
	return drivers.All().Build(name, d.Type, d.Options, logger)
}

// CheckSchema refuses to start on a schema this build does not expect, naming the fix.
func CheckSchema(ctx context.Context, st *store.Store, dsn string) error {
	return checkSchema(ctx, st.Table(), dsn, st.SchemaVersion)
}

// checkSchema is CheckSchema with the version read by version.
func checkSchema(ctx context.Context, name table.Name, dsn string, version func(context.Context) (uint, bool, error)) error {
	v, dirty, err := version(ctx)
	if err != nil {
		return err
	}
	want := migrations.Latest()
	if v == 0 && !dirty {
		if err := migrations.Unrecorded(ctx, dsn, name); err != nil {
			return err
		}
	}
	switch {
	case dirty:
		return fmt.Errorf("%s: schema version %d is dirty (a migration failed half-way); repair it before starting", name, v)
	case v != uint(want):
		return fmt.Errorf("%s: schema is at version %d, this build needs %d: run `outboxd migrate up` or start with --migrate", name, v, want)
	}
	return nil
}

// housekeepingDelay holds back the janitor's first cycle and the samplers' first
// samples after start. Started at once, their five queries took every connection of
// the general pool, each with its handshake, while /readyz waited behind them for one:
// 12 of the 66 ms from exec to ready (docs/benchmarks.md). The pipelines, which
// claim on their own pool, and the listener start at once.
const housekeepingDelay = 500 * time.Millisecond

// pause waits d, and reports false if ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Run drains every stream until ctx ends, then stops in two phases: the pipelines
// first (they write back and release their leases), then the listener, janitor and
// sampler; finally it closes drivers and pool.
func (d *Dispatcher) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(gctx))
	defer stopBackground()
	var background sync.WaitGroup
	// The shared poll starts with the pipelines, which wait for it; the housekeeping
	// loops after housekeepingDelay.
	loops := []func(context.Context) error{d.listener.Run, d.poller.Run, d.janitor.Run, d.sampler.Run}
	for i, loop := range loops {
		background.Add(1)
		go func() {
			defer background.Done()
			if i > 1 && !pause(bgCtx, housekeepingDelay) {
				return
			}
			_ = loop(bgCtx) // each loop logs its own trouble and returns nil when stopped
		}()
	}
	for _, p := range d.pipelines {
		g.Go(func() error { return p.Run(gctx) })
	}
	err := g.Wait()
	stopBackground()
	background.Wait()
	// The bus drains last, while the drivers are still open, so the dead letters of the
	// final batches are forwarded; then the forwarder stops retrying.
	busCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if berr := d.bus.Close(busCtx); berr != nil {
		d.log.Warn("event bus did not drain before shutdown", "err", berr)
	}
	if d.deadLetter != nil {
		d.deadLetter.Close()
	}
	d.failures.Close() // the failures left out of the log since the last summary
	return errors.Join(err, d.close())
}

func (d *Dispatcher) close() error {
	var errs []error
	for _, name := range sortedKeys(d.drivers) { // every driver once, dead-letter ones too
		if err := d.drivers[name].Close(); err != nil {
			errs = append(errs, fmt.Errorf("close driver %s: %w", name, err))
		}
	}
	d.drivers, d.router = nil, nil
	for _, p := range []**pgxpool.Pool{&d.pool, &d.pipePool, &d.sessionPool} {
		if *p != nil {
			(*p).Close()
			*p = nil
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// StoreOptions are the store's options the janitor's settings call for: with retention 0
// nothing keeps delivered rows, so acknowledging deletes them.
func StoreOptions(j config.Janitor) []store.Option {
	if j.Retention == 0 {
		return []store.Option{store.WithAckByDelete()}
	}
	return nil
}

// TTLOptions gives each stream with a ttl its store option: its claims leave messages
// older than that unclaimed and expire them (store/expiry.go).
func TTLOptions(streams map[string]config.Stream) []store.Option {
	var opts []store.Option
	for name, s := range streams {
		if s.TTL > 0 {
			opts = append(opts, store.WithTTL(name, s.TTL))
		}
	}
	return opts
}

// ListenerConnected reports whether the LISTEN connection is up, so that a caller
// timing wake-ups can wait for it.
func (d *Dispatcher) ListenerConnected() bool { return d.listener.Connected() }
