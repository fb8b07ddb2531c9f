// Package dispatch runs outboxd's loops: one pipeline per stream that claims, publishes
// and writes back, the listener that wakes pipelines, the shared poll that wakes those
// with rows to claim (poller.go), and their circuit breakers.
//
// Invariants: a row is acknowledged only after the broker confirmed it; every
// write-back presents the lease token of its claim, or, for a claim held in a
// transaction (PipelineConfig.Transaction), runs in that transaction, which commits
// only once every outcome is written (held.go); a message that never reached the
// broker costs no attempt; and at shutdown every row not published is handed back (its
// lease released, or its lock with the transaction's end) so another replica can take
// the rows at once. Notifications only shorten waits: polling alone delivers everything.
//
// Package dispatch is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// Store is what a pipeline needs from the database.
type Store interface {
	// Claim and ClaimHeld take rows after from (store.Position): a backlog's next batch
	// resumes where its last one ended (drain).
	Claim(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, from store.Position) (store.Claim, error)
	ClaimOrdered(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, cur *store.KeyCursor) (store.Claim, error)
	Ack(ctx context.Context, token store.Token, ids []int64) (store.AckResult, error)
	// AckAgain is Ack sent again after a try whose answer was lost (outcome.go).
	AckAgain(ctx context.Context, token store.Token, owner string, leaseUntil time.Time, ids []int64) (store.AckResult, error)
	Retry(ctx context.Context, token store.Token, retries []store.Retry) (store.WriteResult, error)
	Defer(ctx context.Context, token store.Token, deferrals []store.Deferral, maxDefer time.Duration) (store.DeferResult, error)
	Fail(ctx context.Context, token store.Token, failures []store.Failure) (store.FailResult, error)
	Release(ctx context.Context, token store.Token, ids []int64) (store.WriteResult, error)
	// TryFlow takes the stream's flow lock (flow.go), nil when another session holds it.
	TryFlow(ctx context.Context, stream string) (*store.Lock, error)
	// ClaimHeld claims as Claim, by row locks in a transaction that Commit or Rollback
	// ends (transaction mode, held.go); the write-backs above run in it.
	ClaimHeld(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, from store.Position) (store.Claim, error)
	Commit(ctx context.Context, token store.Token, acks []int64) (store.AckResult, error)
	Rollback(ctx context.Context, token store.Token)
}

// Publisher is what a pipeline needs from the router (router.Publisher): one error per
// message, in order. A pipeline hands each row's own topic; the router turns it into
// the destination (the stream's topic prefix) and applies its middlewares (tracing).
type Publisher interface {
	Publish(ctx context.Context, msgs []router.Message) []error
}

// OrderedPublisher is what the pipeline of an ordered stream needs besides: a publish
// that never sends a message after an earlier one of its key failed
// (router.Publisher.PublishOrdered, whose middlewares sit under its chunking).
type OrderedPublisher interface {
	Publisher
	PublishOrdered(ctx context.Context, msgs []router.Message) []error
}

// Emitter receives the pipeline's events. It must not block.
type Emitter interface {
	Emit(events.Event)
}

var (
	_ Store            = (*store.Store)(nil)
	_ Publisher        = (*router.Publisher)(nil)
	_ OrderedPublisher = (*router.Publisher)(nil)
)

// PipelineConfig tunes one stream's pipeline; zero values take the defaults noted.
type PipelineConfig struct {
	Stream         string
	Owner          string        // replica id recorded on every lease
	BatchSize      int           // rows per claim (100)
	Concurrency    int           // batches publishing at once (2)
	PollInterval   time.Duration // wait when idle and not woken (1s)
	LeaseTTL       time.Duration // lease length (30s); must exceed PublishTimeout
	PublishTimeout time.Duration // bound on one batch's publish (10s)
	BackoffInitial time.Duration // first retry pause (1s)
	BackoffMax     time.Duration // longest retry pause (5m)
	MaxAttempts    int           // attempts before a refused message fails (10)
	MaxDefer       time.Duration // longest deferral before failing; 0 = unbounded
	// ShutdownGrace bounds how long in-flight publishes may finish after shutdown
	// begins before they are cancelled and their rows released (10s).
	ShutdownGrace time.Duration
	// BreakerThreshold consecutive unreachable batches open the breaker (3); it stays
	// open BreakerPause at first, doubling up to BreakerMaxPause (1s, 30s).
	BreakerThreshold int
	BreakerPause     time.Duration
	BreakerMaxPause  time.Duration
	// Ordered delivers the messages that share a key in id order (docs/ordering.md):
	// claims take a key only from its head, and a key stops at its first message that
	// does not go through. Messages without a key are not ordered.
	Ordered bool
	// NoFlow keeps the pipeline parked however fast messages arrive: it never polls
	// every millisecond nor stops producers from notifying (flow.go).
	NoFlow bool
	// FlowRate is how many notifications a second for the stream start a flow
	// (DefaultFlowRate).
	FlowRate int
	// Transaction holds each claim as row locks in a transaction that stays open while
	// the batch is published and commits its write-backs (streams.<name>.claim:
	// transaction, docs/contract.md); otherwise claims are leases. Not for ordered
	// streams.
	Transaction bool
	// Polled says a Poller watches the stream: parked and not woken, the pipeline then
	// waits polledBackstop instead of PollInterval, and the Poller wakes it when its
	// stream has rows to claim or to expire. It starts parked too, so that a thousand
	// streams starting together do not claim all at once: the Poller's first poll, at
	// its start, wakes those with rows.
	Polled bool
}

// polledBackstop is how long a Polled pipeline waits on its own: should the Poller stop,
// the stream is still claimed this often.
const polledBackstop = time.Minute

func (c *PipelineConfig) defaults() error {
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setInt(&c.BatchSize, 100)
	setInt(&c.Concurrency, 2)
	setInt(&c.MaxAttempts, 10)
	setInt(&c.BreakerThreshold, 3)
	setInt(&c.FlowRate, DefaultFlowRate)
	setDur(&c.PollInterval, time.Second)
	setDur(&c.LeaseTTL, 30*time.Second)
	setDur(&c.PublishTimeout, 10*time.Second)
	setDur(&c.BackoffInitial, time.Second)
	setDur(&c.BackoffMax, 5*time.Minute)
	setDur(&c.ShutdownGrace, 10*time.Second)
	setDur(&c.BreakerPause, time.Second)
	setDur(&c.BreakerMaxPause, 30*time.Second)
	switch {
	case c.Stream == "":
		return errors.New("pipeline: stream name is empty")
	case c.Owner == "":
		return fmt.Errorf("pipeline %s: owner (replica id) is empty", c.Stream)
	case c.BatchSize < 0 || c.Concurrency < 0 || c.MaxAttempts < 0:
		return fmt.Errorf("pipeline %s: batch size, concurrency and max attempts must be positive", c.Stream)
	case c.LeaseTTL <= c.PublishTimeout:
		return fmt.Errorf("pipeline %s: lease TTL %s must exceed the publish timeout %s", c.Stream, c.LeaseTTL, c.PublishTimeout)
	case c.Transaction && c.Ordered:
		return fmt.Errorf("pipeline %s: an ordered stream claims by lease, not in a transaction", c.Stream)
	}
	return nil
}

// Pipeline drains one stream: claim a batch, publish it, write every outcome back.
type Pipeline struct {
	cfg   PipelineConfig
	store Store
	pub   Publisher
	emit  Emitter
	log   *slog.Logger
	wake  chan struct{}
	now   func() time.Time

	mu      sync.Mutex // guards breaker
	breaker *breaker

	ordered OrderedPublisher // set for an ordered stream
	cursor  store.KeyCursor  // where the next ordered claim resumes; Run's own
	resume  store.Resume     // where the batch slots' next claim starts; shared by them
	flow    flow             // parked or flowing; Run's own
}

// NewPipeline builds a pipeline; emit and logger may be nil.
func NewPipeline(cfg PipelineConfig, st Store, pub Publisher, emit Emitter, logger *slog.Logger) (*Pipeline, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if st == nil || pub == nil {
		return nil, fmt.Errorf("pipeline %s: store and publisher are required", cfg.Stream)
	}
	var ordered OrderedPublisher
	if cfg.Ordered {
		var ok bool
		if ordered, ok = pub.(OrderedPublisher); !ok {
			return nil, fmt.Errorf("pipeline %s: the stream is ordered but its publisher cannot publish in key order", cfg.Stream)
		}
	}
	emit, logger = orDiscard(emit, logger)
	logger = logger.With("stream", cfg.Stream)
	p := &Pipeline{
		cfg:     cfg,
		store:   st,
		pub:     pub,
		emit:    emit,
		log:     logger,
		wake:    make(chan struct{}, 1),
		now:     time.Now,
		breaker: newBreaker(cfg.BreakerThreshold, cfg.BreakerPause, cfg.BreakerMaxPause),
		ordered: ordered,
	}
	p.flow.stream, p.flow.rate, p.flow.try, p.flow.log, p.flow.emit = cfg.Stream, cfg.FlowRate, st.TryFlow, logger, emit
	if cfg.NoFlow {
		p.flow.try = nil
	}
	return p, nil
}

type discardEmitter struct{}

func (discardEmitter) Emit(events.Event) {}

// Stream is the stream this pipeline drains.
func (p *Pipeline) Stream() string { return p.cfg.Stream }

// Wake asks the pipeline to claim now instead of at its next poll: the listener calls
// it for each notification of the stream, which counts towards a flow. It never blocks;
// wake-ups arriving while one is pending fold into it.
func (p *Pipeline) Wake() {
	p.flow.notified()
	p.wakeUp()
}

// wakeUp is Wake without counting a notification.
func (p *Pipeline) wakeUp() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run drains the stream until ctx ends, then shuts down in two phases: it stops
// claiming, lets in-flight publishes finish within ShutdownGrace (cancelling them after
// that), writes back every known outcome and releases the rest. It returns when every
// batch is written back.
func (p *Pipeline) Run(ctx context.Context) error {
	// hard ends in-flight publishes; it outlives ctx by the shutdown grace.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	// The grace runs from shutdown's start; once Run has returned, its end cancels
	// nothing that is still running.
	defer context.AfterFunc(ctx, func() { time.AfterFunc(p.cfg.ShutdownGrace, cancelHard) })()
	slots := make(chan struct{}, p.cfg.Concurrency)
	var inflight sync.WaitGroup
	claimFailures := 0
	defer p.flow.stop(ctx) // producers notify again once this pipeline is gone
	if p.cfg.Polled {
		p.sleep(ctx, p.idlePoll(), true)
	}

	for ctx.Err() == nil {
		if !p.takeSlot(ctx, slots) {
			continue
		}
		p.mu.Lock()
		limit, wait, change := p.breaker.allow(p.now(), p.cfg.BatchSize)
		closed := p.breaker.state == events.BreakerClosed
		p.mu.Unlock()
		p.report(change)
		if !closed {
			// An open or half-open breaker claims a trial now and then at most: the
			// stream is not polled every millisecond, so it must not hold the flow lock.
			p.flow.park(ctx, p.now())
		}
		if limit == 0 {
			<-slots
			p.sleep(ctx, wait, false)
			continue
		}

		start := p.now()
		// A claim is not cancelled when shutdown begins: one the database applied but
		// whose rows never reached us would stay leased, out of every replica's reach,
		// until its lease expired. Shutdown waits for it (within its grace), then
		// publishes or releases its rows. Only its own deadline (p.claim), which a
		// healthy database path never reaches, abandons it.
		p.resume.Restart(start)
		claim, err := p.claim(hard, limit, store.Position{})
		claimTime := p.now().Sub(start)
		if err != nil || !closed {
			p.flow.park(ctx, p.now()) // a failed claim: the next one waits its backoff
		} else {
			p.flow.claimed(ctx, p.now(), len(claim.Messages))
		}
		if err != nil || len(claim.Messages) == 0 {
			<-slots
			p.mu.Lock()
			p.breaker.cancelTrial()
			p.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				claimFailures++
				p.emit.Emit(events.ClaimFailed{Stream: p.cfg.Stream, Err: err})
				if errors.Is(err, context.DeadlineExceeded) {
					// Its own deadline (p.claim) abandoned it; the database may have
					// applied it all the same. Say under which token, so that the rows
					// it leased can be told from a stale write-back's.
					p.log.Warn("claim abandoned at its deadline; any rows the database leased to it wait for their lease to expire",
						"lease_token", claim.Token.String())
				}
				if claimFailures == 1 || claimFailures%30 == 0 {
					p.log.Error("claim failed", "err", err, "consecutive", claimFailures)
				}
				p.sleep(ctx, min(p.cfg.PollInterval, backoff(100*time.Millisecond, 5*time.Second, claimFailures)), false)
			} else if err == nil {
				claimFailures = 0
				p.sleep(ctx, p.flow.wait(p.now(), p.idlePoll()), true)
			}
			continue
		}
		claimFailures = 0

		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-slots }()
			p.drain(ctx, hard, claim, claimTime, limit)
		}()
		if len(claim.Messages) < limit {
			// Not a full batch: the backlog is drained. Wait for news or the poll
			// (a millisecond while flowing).
			p.sleep(ctx, p.flow.wait(p.now(), p.idlePoll()), true)
		}
	}

	// Claiming has stopped: producers must notify again now, not once in-flight work
	// ends, which may take the whole shutdown grace.
	p.flow.stop(ctx)
	inflight.Wait()
	return nil
}

// idlePoll is how long the pipeline waits for news when parked.
func (p *Pipeline) idlePoll() time.Duration {
	if p.cfg.Polled {
		return max(p.cfg.PollInterval, polledBackstop)
	}
	return p.cfg.PollInterval
}

// takeSlot waits for a free batch slot, false once ctx ends. A flowing pipeline that
// waits longer than flowLinger for one (its batches stuck publishing or writing back) is
// not polling every millisecond, so it parks: producers notify again, and other
// replicas' pipelines hear of their messages.
func (p *Pipeline) takeSlot(ctx context.Context, slots chan struct{}) bool {
	if p.flow.flowing() {
		t := time.NewTimer(flowLinger)
		select {
		case slots <- struct{}{}:
			t.Stop()
			return true
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
			p.flow.park(ctx, p.now())
		}
	}
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// drain processes a claimed batch, and while batches come back full it claims and
// processes the next one itself, on the slot it holds: so a backlog is claimed by up to
// concurrency claims at once, not one after another by Run's loop, which waits for a
// slot. It hands the slot back after a batch that was not full, a claim that failed,
// the breaker leaving closed, or shutdown; Run's loop then decides how long to wait.
// Ordered streams claim from Run's loop only: their key cursor is its own.
//
// Each next claim starts after the furthest row the slots have claimed (store.Resume,
// shared by them), so that it steps neither over the index entries of every row
// acknowledged since the last VACUUM nor over the rows the other slots took; at least
// every store.RescanEvery one starts from the beginning instead, and finds the rows that
// landed behind the position (committed late, handed back, skipped while locked).
func (p *Pipeline) drain(ctx, hard context.Context, claim store.Claim, claimTime time.Duration, limit int) {
	for {
		p.resume.Claimed(claim, limit)
		p.process(ctx, hard, claim, claimTime)
		if len(claim.Messages) < limit || limit < p.cfg.BatchSize || p.ordered != nil || ctx.Err() != nil || !p.closed() {
			return
		}
		start := p.now()
		next, err := p.claim(hard, limit, p.resume.From(start))
		if err != nil || len(next.Messages) == 0 {
			return // Run's loop claims again, and reports a failure if it persists
		}
		claim, claimTime = next, p.now().Sub(start)
	}
}

// closed reports whether the stream's breaker is closed (claiming normally).
func (p *Pipeline) closed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.breaker.state == events.BreakerClosed
}

// claim leases the next batch: an ordered stream's keys from their heads (resuming the
// walk over keys where the last claim left it), any other stream's rows in order of
// availability.
//
// A claim has a deadline of its own, the lease TTL less the publish timeout: a batch
// claimed later than that could not be published within its lease anyway, and a stalled
// database path must not hold up the pipeline (and its flow lock) until the kernel gives
// up on the connection. A claim abandoned at its deadline that the database applied
// leaves its rows leased until the lease expires and the janitor hands them back:
// nothing is lost. pgx closes a connection whose statement was interrupted, so the pool
// discards it instead of reusing it mid-statement.
func (p *Pipeline) claim(ctx context.Context, limit int, from store.Position) (store.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.LeaseTTL-p.cfg.PublishTimeout)
	defer cancel()
	var c store.Claim
	var err error
	switch {
	case p.ordered != nil:
		c, err = p.store.ClaimOrdered(ctx, p.cfg.Stream, limit, p.cfg.Owner, p.cfg.LeaseTTL, &p.cursor)
	case p.cfg.Transaction:
		c, err = p.store.ClaimHeld(ctx, p.cfg.Stream, limit, p.cfg.Owner, p.cfg.LeaseTTL, from)
	default:
		c, err = p.store.Claim(ctx, p.cfg.Stream, limit, p.cfg.Owner, p.cfg.LeaseTTL, from)
	}
	p.reportExpired(c.Expired)
	return c, err
}

// reportExpired emits one event per row the claim's expiry sweep expired (store
// expiry.go): counted, logged and, where configured, dead-lettered by the subscribers.
func (p *Pipeline) reportExpired(rows []store.Expired) {
	for _, e := range rows {
		p.emit.Emit(events.MessageExpired{Stream: p.cfg.Stream, ID: e.ID, Topic: e.Topic, Key: e.Key,
			Headers: e.Headers, Payload: e.Payload, MessageID: e.MessageID, DedupID: e.DedupID,
			Attempts: e.Attempts, Err: e.Reason})
	}
}

// sleep waits for d, ctx's end, or (when wakeable) a wake-up.
func (p *Pipeline) sleep(ctx context.Context, d time.Duration, wakeable bool) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = p.wake
	}
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
	}
}

func (p *Pipeline) report(c *events.BreakerChanged) {
	if c == nil {
		return
	}
	c.Stream = p.cfg.Stream
	p.emit.Emit(*c)
	switch c.To {
	case events.BreakerOpen:
		p.log.Warn("broker unreachable: pausing claims", "from", c.From, "pause", c.Pause)
	case events.BreakerClosed:
		p.log.Info("broker reachable again: claiming resumed")
	}
}
