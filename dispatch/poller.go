package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DueFinder is what the shared poll needs from the database (store.Store).
type DueFinder interface {
	// DueStreams names every stream with pending rows, true for those with a row to
	// claim or to expire now.
	DueStreams(ctx context.Context) (map[string]bool, error)
	// TTL is the stream's time to live, 0 when it has none.
	TTL(stream string) time.Duration
}

// Poller is the shared poll of every pipeline configured Polled: once an interval it
// asks the database, in one statement for the whole table, which streams have rows to
// claim or to expire, and wakes those pipelines only. An idle dispatcher so costs one
// query an interval, not a claim and an expiry sweep per stream. A stream with a ttl is
// woken whenever it has pending rows at all, since they may have outlived it. When the
// question fails, every pipeline is woken, as if each polled on its own: polling still
// delivers everything.
type Poller struct {
	interval  time.Duration
	store     DueFinder
	pipelines []*Pipeline
	log       *slog.Logger
	kick      chan struct{}
	// The first poll's answer, applied once (first) by Prime, PrimeWith or Run's own
	// first poll: answered closes then, after primedOK and primeWoke are set.
	first     sync.Once
	answered  chan struct{}
	primedOK  atomic.Bool // that answer came without error
	primeWoke atomic.Bool // and woke a pipeline
	awaiting  bool        // AwaitPrime: Run waits for PrimeWith before it polls
}

// NewPoller builds the shared poll of pipelines, run every interval.
func NewPoller(interval time.Duration, st DueFinder, pipelines []*Pipeline, logger *slog.Logger) *Poller {
	_, logger = orDiscard(nil, logger)
	return &Poller{interval: interval, store: st, pipelines: pipelines, log: logger.With("component", "poller"),
		kick: make(chan struct{}, 1), answered: make(chan struct{})}
}

// Kick asks for a poll now (the listener, after it reconnected). It never blocks.
func (p *Poller) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Prime polls once before Run, so that the first poll is not made while the process
// first answers /readyz (both would want the general pool's one open connection, and
// one of them would wait for a new connection's handshake). Run then begins with a
// wait; after a failed Prime it polls at once. A start waits for Prime, so it gives up
// after PrimeTimeout (a table locked by a migration, say) whatever the interval.
func (p *Poller) Prime(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, PrimeTimeout)
	defer cancel()
	woke, err := p.poll(ctx)
	p.answer(err == nil, woke > 0)
}

// AwaitPrime says the first poll's answer will come from PrimeWith, asked elsewhere
// while Run has begun: the listener asks it on its start connection, after that
// connection's LISTEN, and the dispatcher does not wait for it. Run waits for it, up to
// PrimeTimeout, instead of polling at once. Call it before Run.
func (p *Poller) AwaitPrime() { p.awaiting = true }

// PrimeWith is Prime with the first poll's answer asked elsewhere: it wakes the
// pipelines due in due, or every one when err is set, in which case Run polls at once.
// It is safe to call while Run runs; a late answer (Run polled without it) only wakes.
func (p *Poller) PrimeWith(due map[string]bool, err error) {
	p.answer(err == nil, p.wake(due, err) > 0)
}

// answer records the first poll's answer, unless one was recorded already.
func (p *Poller) answer(ok, woke bool) {
	p.first.Do(func() {
		p.primedOK.Store(ok)
		p.primeWoke.Store(woke)
		close(p.answered)
	})
}

// Primed is closed once the first poll's answer has been applied (Prime, PrimeWith or
// Run's first poll); PrimeWoke tells what it found from then on.
func (p *Poller) Primed() <-chan struct{} { return p.answered }

// PrimeWoke reports whether the first poll woke a pipeline: the start met messages to
// deliver (or could not tell). It is false until Primed is closed.
func (p *Poller) PrimeWoke() bool { return p.primeWoke.Load() }

// PrimeTimeout bounds Prime, and how long Run waits for PrimeWith after AwaitPrime.
const PrimeTimeout = 5 * time.Second

// Run polls at once (unless Prime did, or after AwaitPrime PrimeWith does in time), then
// every interval or when kicked, until ctx ends.
func (p *Poller) Run(ctx context.Context) error {
	if p.awaiting && !waitOrSignal(ctx, PrimeTimeout, p.answered) {
		return nil
	}
	primed := false
	select {
	case <-p.answered:
		primed = p.primedOK.Load()
	default:
	}
	failures := 0
	for first := !primed; ; first = false {
		if !first && !waitOrSignal(ctx, jitter(p.interval), p.kick) {
			return nil
		}
		woke, err := p.poll(ctx)
		if first {
			p.answer(err == nil, woke > 0)
		}
		if err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%60 == 0 {
				p.log.Warn("shared poll failed; every pipeline polls on its own", "err", err, "consecutive", failures)
			}
			continue
		}
		failures = 0
	}
}

// waitOrSignal waits d or until signal delivers, and reports false if ctx ended first.
func waitOrSignal(ctx context.Context, d time.Duration, signal <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-signal:
	}
	return true
}

// poll wakes the pipelines whose streams are due, or every pipeline when it cannot tell,
// and returns how many it woke.
func (p *Poller) poll(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, max(p.interval, 5*time.Second))
	defer cancel()
	due, err := p.store.DueStreams(ctx)
	return p.wake(due, err), err
}

// wake wakes the pipelines whose streams are due in due, every one when err is set,
// and returns how many it woke.
func (p *Poller) wake(due map[string]bool, err error) int {
	woke := 0
	for _, pl := range p.pipelines {
		now, pending := due[pl.cfg.Stream]
		if err != nil || now || (pending && p.store.TTL(pl.cfg.Stream) > 0) {
			pl.wakeUp()
			woke++
		}
	}
	return woke
}
