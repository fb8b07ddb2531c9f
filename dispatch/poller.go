package dispatch

import (
	"context"
	"log/slog"
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
	primed    bool
	primeWoke bool // the poll Prime or PrimeWith applied woke a pipeline
}

// NewPoller builds the shared poll of pipelines, run every interval.
func NewPoller(interval time.Duration, st DueFinder, pipelines []*Pipeline, logger *slog.Logger) *Poller {
	_, logger = orDiscard(nil, logger)
	return &Poller{interval: interval, store: st, pipelines: pipelines, log: logger.With("component", "poller"),
		kick: make(chan struct{}, 1)}
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
	p.primed, p.primeWoke = err == nil, woke > 0
}

// PrimeWith is Prime with the first poll's answer asked elsewhere (the dispatcher's
// start asks it on the listener's connection, after its LISTEN, beside the schema
// check): it wakes the pipelines due in due, or every one when err is set, in which
// case Run polls at once.
func (p *Poller) PrimeWith(due map[string]bool, err error) {
	woke := p.wake(due, err)
	p.primed, p.primeWoke = err == nil, woke > 0
}

// PrimeWoke reports whether the first poll, applied by Prime or PrimeWith, woke a
// pipeline: the start met messages to deliver (or could not tell).
func (p *Poller) PrimeWoke() bool { return p.primeWoke }

// PrimeTimeout bounds Prime, and a first poll asked elsewhere for PrimeWith: a start
// waits for it.
const PrimeTimeout = 5 * time.Second

// Run polls at once (unless Prime did), then every interval or when kicked, until ctx
// ends.
func (p *Poller) Run(ctx context.Context) error {
	failures := 0
	for first := !p.primed; ; first = false {
		if !first {
			t := time.NewTimer(jitter(p.interval))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			case <-p.kick:
				t.Stop()
			}
		}
		if _, err := p.poll(ctx); err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%60 == 0 {
				p.log.Warn("shared poll failed; every pipeline polls on its own", "err", err, "consecutive", failures)
			}
			continue
		}
		failures = 0
	}
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
