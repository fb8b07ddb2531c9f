package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// message is the i-th message of a phase: streams round-robin, keys cycling, the same
// incompressible payload.
func (b *bench) message(i int) producer.Message {
	return producer.Message{
		Stream: b.streams[i%len(b.streams)], Topic: benchTopic,
		Key: "key-" + strconv.Itoa(i%b.opt.set.Keys), Payload: b.payload,
	}
}

// empty removes every row but the retained ones, so that each phase starts from the
// same table.
func (b *bench) empty(ctx context.Context) error {
	if err := b.store.BenchEmpty(ctx, b.retainedUpTo); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// retain writes the --retained delivered rows once, with the bench's payload size, as a
// deployment with a long retention would hold them, and remembers where they end.
func (b *bench) retain(ctx context.Context) error {
	n := b.opt.set.Retained
	if n == 0 {
		return nil
	}
	var done atomic.Int64
	b.progress.begin("retained delivered rows", int64(n), done.Load)
	defer b.progress.stop()
	const chunk = 100000
	for first := 0; first < n; first += chunk {
		count := min(chunk, n-first)
		upTo, err := b.store.BenchRetain(ctx, b.streams[0], b.payload, count)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		b.retainedUpTo = upTo
		done.Add(int64(count))
	}
	// Writing them dirtied gigabytes of pages; without a checkpoint now, flushing them
	// would fall on whichever phase runs next (the SQL ceiling). CHECKPOINT needs a
	// superuser or pg_checkpoint: without either, the phases pay for it as they would.
	if err := b.store.BenchVacuum(ctx, true); err != nil {
		return fmt.Errorf("bench: the retained rows: %w", err)
	}
	return nil
}

// fill empties the table and commits a backlog of n messages through the producer's
// COPY path, then runs VACUUM ANALYZE: a backlog that built up over time would have
// had autovacuum's statistics, and every phase should plan alike.
func (b *bench) fill(ctx context.Context, phase string, n int) error {
	return b.fillTx(ctx, phase, n, benchFillTx)
}

// fillTx is fill with perTx messages per transaction.
func (b *bench) fillTx(ctx context.Context, phase string, n, perTx int) error {
	if err := b.empty(ctx); err != nil {
		return err
	}
	var done atomic.Int64
	b.progress.begin(phase+": filling the backlog", int64(n), done.Load)
	defer b.progress.stop()
	msgs := make([]producer.Message, 0, perTx)
	for first := 0; first < n; first += perTx {
		msgs = msgs[:0]
		for i := first; i < min(n, first+perTx); i++ {
			msgs = append(msgs, b.message(i))
		}
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.writer.EnqueueBatch(ctx, tx, msgs) })
		if err != nil {
			return fmt.Errorf("bench: fill the backlog: %w", err)
		}
		done.Add(int64(len(msgs)))
	}
	if err := b.store.BenchVacuum(ctx, false); err != nil {
		return fmt.Errorf("bench: the backlog: %w", err)
	}
	return nil
}

// sqlCeiling fills a backlog of --messages and drains all of it with claimAck.
func (b *bench) sqlCeiling(ctx context.Context) (benchThroughput, error) {
	n := b.opt.set.Messages
	if err := b.fill(ctx, "SQL ceiling", n); err != nil {
		return benchThroughput{}, err
	}
	return b.claimAck(ctx, "SQL ceiling", n, false, []*store.Store{b.store})
}

// claimAck moves n rows of the backlog in the table with the dispatcher's own claim and
// acknowledgement statements and no broker: concurrency goroutines per stream, each
// claiming a batch and acknowledging all of it, until n rows are acknowledged (the whole
// backlog when it is n rows, or its first n). The claimers share n out: none asks for
// more rows than are left of it, and a claim gives back what it did not find, so exactly
// n move; with n 0 they move rows until a claim from the start finds none. With held
// (not for ordered streams), each claim is held in its transaction and acknowledged by
// its commit (store.ClaimHeld, store.Commit), as a stream whose claim mode is
// transaction, the default, claims; without, by lease (store.Claim, store.Ack).
//
// Each of stores claims as one replica: concurrency goroutines per stream sharing that
// replica's resume point. With several (replicaStores), the claimers are that many
// replicas' worth, as that many `outboxd run` processes would claim: each on sessions of
// its own, knowing nothing of the others' claims. What N replicas cost the database, and
// no dispatcher's work, is then measured: the database alone, as N replicas use it
// (docs/benchmarks.md, the replicas mode).
//
// When b.between is set, each claimer (worker, numbered from 0 over stores, streams and
// concurrency) hands it every non-empty claim before acknowledging it, and stops at its
// error: the --alone claimer publishes there.
func (b *bench) claimAck(ctx context.Context, phase string, n int, held bool, stores []*store.Store) (benchThroughput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	var moved, unasked atomic.Int64
	unasked.Store(int64(n))
	ask := func() int { // the next claim's limit; 0 once every row of n is asked for
		if n <= 0 {
			return b.opt.set.BatchSize
		}
		for {
			left := unasked.Load()
			limit := min(left, int64(b.opt.set.BatchSize))
			if limit <= 0 || unasked.CompareAndSwap(left, left-limit) {
				return int(max(limit, 0))
			}
		}
	}
	b.progress.begin(phase, int64(n), moved.Load)
	g, gctx := errgroup.WithContext(ctx)
	lease := config.DefaultStream().LeaseTTL
	start := time.Now()
	worker := 0
	for _, st := range stores {
		acknowledge := st.Ack
		if held && !b.opt.set.Ordered {
			acknowledge = st.Commit
		}
		for _, stream := range b.streams {
			// Claims resume as a pipeline's do, from one store.Resume per stream shared
			// by its claimers; a claimer stops once every row of n is asked for, or when
			// a claim from the start finds nothing.
			resume := new(store.Resume)
			for range b.opt.set.Concurrency {
				w := worker
				worker++
				g.Go(func() error {
					var cur store.KeyCursor
					for {
						limit := ask()
						if limit == 0 {
							return nil
						}
						var c store.Claim
						var err error
						from := resume.From(time.Now())
						switch {
						case b.opt.set.Ordered:
							c, err = st.ClaimOrdered(gctx, stream, limit, benchReplica, lease, &cur)
						case held:
							c, err = st.ClaimHeld(gctx, stream, limit, benchReplica, lease, from)
						default:
							c, err = st.Claim(gctx, stream, limit, benchReplica, lease, from)
						}
						if err != nil {
							return err
						}
						unasked.Add(int64(limit - len(c.Messages)))
						if resume.Claimed(c, limit); len(c.Messages) == 0 {
							if from.IsZero() || b.opt.set.Ordered {
								return nil
							}
							continue
						}
						if b.between != nil {
							if err := b.between(gctx, w, c); err != nil {
								// Hand the claim back, or a held transaction keeps a
								// session of the pool, which then never closes. Release
								// writes only a leased claim's rows, Rollback ends only a
								// held claim's transaction: each does nothing for the other.
								hctx := context.WithoutCancel(gctx)
								_, _ = st.Release(hctx, c.Token, c.IDs())
								st.Rollback(hctx, c.Token)
								return err
							}
						}
						res, err := acknowledge(gctx, c.Token, c.IDs())
						if err != nil {
							return err
						}
						if res.Changed != len(c.Messages) {
							return fmt.Errorf("acknowledged %d of %d claimed rows", res.Changed, len(c.Messages))
						}
						moved.Add(int64(res.Changed))
					}
				})
			}
		}
	}
	if err := g.Wait(); err != nil {
		return benchThroughput{}, fmt.Errorf("bench: %s: %w", phase, err)
	}
	t := benchThroughput{Messages: moved.Load(), Seconds: time.Since(start).Seconds()}
	if n > 0 && t.Messages != int64(n) {
		return t, fmt.Errorf("bench: %s moved %d of %d rows", phase, t.Messages, n)
	}
	t.MsgsPerSec = round(float64(t.Messages)/t.Seconds, 1)
	b.progress.end(fmt.Sprintf("%s msg/s", thousands(t.MsgsPerSec)))
	return t, nil
}

// dispatcherConfig is benchConfig with the brokers the bench reached.
func (b *bench) dispatcherConfig(driverType string) (config.Config, error) {
	return benchConfig(b.opt, driverType)
}

// latency runs a dispatcher for driverType in this process, its publisher wrapped to
// note when each message was confirmed, and measures commit → confirmation first for
// messages sent one at a time through the idle pipeline, then at the offered rate.
func (b *bench) latency(ctx context.Context, driverType string, rep *benchDriverReport) (err error) {
	if err := b.empty(ctx); err != nil {
		return err
	}
	cfg, err := b.dispatcherConfig(driverType)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	conf, stopDispatcher, err := b.inProcess(ctx, cfg, driverType)
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := stopDispatcher(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()

	// Idle: one message at a time, the next one 2 ms after the previous was confirmed
	// so that its write-back has finished. The first is a warm-up (connections, broker
	// metadata) and not counted.
	n := b.opt.set.IdleSamples
	var done atomic.Int64
	b.progress.begin("latency "+driverType+": idle", int64(n), done.Load)
	idle := make([]time.Duration, 0, n)
	for i := -1; i < n; i++ {
		committed, confirmed, err := b.commitOne(ctx, i, conf)
		if err != nil {
			return err
		}
		select {
		case at := <-confirmed:
			if i >= 0 {
				idle = append(idle, at.Sub(committed))
				done.Add(1)
			}
		case <-time.After(30 * time.Second):
			return fmt.Errorf("bench: latency %s: a message committed at %s was not confirmed within 30s", driverType, committed.Format(time.TimeOnly))
		case <-ctx.Done():
			return ctx.Err()
		}
		time.Sleep(2 * time.Millisecond)
	}
	rep.LatencyIdle = latencyFigures(idle)
	b.progress.end(fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", rep.LatencyIdle.P50Ms, rep.LatencyIdle.P99Ms))

	rep.LatencyAtRate, err = b.atRate(ctx, conf, driverType, float64(b.opt.set.Rate), b.opt.set.LatencySeconds, b.message)
	return err
}

// inProcess starts a dispatcher of cfg in this process, its publisher wrapped to note
// when each message was confirmed, and waits until its listener is connected; stop
// stops it and returns what its Run returned.
func (b *bench) inProcess(ctx context.Context, cfg config.Config, label string) (*confirmLog, func() error, error) {
	conf := newConfirmLog()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if !b.opt.json {
		logger = app.NewLogger(config.Log{Level: "warn", Format: "text"}, b.o.Stderr)
	}
	d, err := app.NewDispatcher(ctx, &cfg, logger, app.Options{Middleware: []router.Middleware{conf.middleware}})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: latency %s: %w", label, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	stop := func() error {
		cancel()
		if err := <-ran; err != nil {
			return fmt.Errorf("bench: latency %s: dispatcher: %w", label, err)
		}
		return nil
	}
	for !d.ListenerConnected() {
		select {
		case <-ctx.Done():
			_ = stop()
			return nil, nil, fmt.Errorf("bench: latency %s: the dispatcher's listener did not connect: %w", label, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return conf, stop, nil
}

// atRate measures commit → confirmation at an offered rate: message i (msg(i)) is
// committed at start + i/rate by whichever of benchRateWorkers is free, each in its own
// transaction, for seconds.
func (b *bench) atRate(ctx context.Context, conf *confirmLog, label string, rate, seconds float64, msg func(int) producer.Message) (benchRateLatency, error) {
	total := int(rate * seconds)
	period := time.Duration(float64(time.Second) / rate)
	type commit struct {
		id int64
		at time.Time
	}
	commits := make([]commit, total)
	var next, committedN atomic.Int64
	b.progress.begin(fmt.Sprintf("latency %s: %s msg/s offered", label, thousands(rate)), int64(total), committedN.Load)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range benchRateWorkers {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= total {
					return nil
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * period)))
				tx, err := b.pool.Begin(gctx)
				if err != nil {
					return err
				}
				id, err := b.writer.Enqueue(gctx, tx, msg(i))
				sent := time.Now()
				if err == nil {
					err = tx.Commit(gctx)
				}
				if err != nil {
					_ = tx.Rollback(context.WithoutCancel(gctx))
					return err
				}
				commits[i] = commit{id: id, at: sent}
				committedN.Add(1)
			}
		})
	}
	if err := g.Wait(); err != nil {
		return benchRateLatency{}, fmt.Errorf("bench: latency %s: produce: %w", label, err)
	}
	var last time.Time
	ids := make([]int64, total)
	for i, c := range commits {
		ids[i] = c.id
		if c.at.After(last) {
			last = c.at
		}
	}
	confirmedAt, err := conf.all(ctx, ids, 30*time.Second)
	if err != nil {
		return benchRateLatency{}, fmt.Errorf("bench: latency %s: %w", label, err)
	}
	lat := make([]time.Duration, total)
	for i, c := range commits {
		lat[i] = confirmedAt[i].Sub(c.at)
	}
	r := benchRateLatency{OfferedPerSec: rate, AchievedPerSec: round(float64(total)/last.Sub(start).Seconds(), 1),
		benchLatency: latencyFigures(lat)}
	b.progress.end(fmt.Sprintf("p50 %.2f ms, p99 %.2f ms at %s msg/s achieved", r.P50Ms, r.P99Ms, thousands(r.AchievedPerSec)))
	return r, nil
}

// commitOne commits message i in its own transaction and returns when the commit
// was sent and a channel that receives the message's confirmation time. The instant
// the commit was sent, not the one it returned, is the reference: on a loaded machine
// the dispatcher can confirm the message before the producer's goroutine runs again,
// which would make a latency negative.
func (b *bench) commitOne(ctx context.Context, i int, conf *confirmLog) (time.Time, <-chan time.Time, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("bench: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	id, err := b.writer.Enqueue(ctx, tx, b.message(max(i, 0)))
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("bench: enqueue: %w", err)
	}
	confirmed := conf.wait(id) // before the commit: the row is visible from then on
	sent := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return time.Time{}, nil, fmt.Errorf("bench: commit: %w", err)
	}
	return sent, confirmed, nil
}

// confirmLog records when each message (by outbox id) was first confirmed.
type confirmLog struct {
	mu      sync.Mutex
	at      map[int64]time.Time
	waiting map[int64]chan time.Time
}

func newConfirmLog() *confirmLog {
	return &confirmLog{at: map[int64]time.Time{}, waiting: map[int64]chan time.Time{}}
}

func (c *confirmLog) record(msgs []router.Message, errs []error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, err := range errs {
		id := msgs[i].ID
		if _, seen := c.at[id]; err != nil || seen {
			continue
		}
		c.at[id] = now
		if ch, ok := c.waiting[id]; ok {
			ch <- now
			delete(c.waiting, id)
		}
	}
}

// wait returns a channel that receives id's confirmation time.
func (c *confirmLog) wait(id int64) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if at, ok := c.at[id]; ok {
		ch <- at
		return ch
	}
	c.waiting[id] = ch
	return ch
}

// all waits up to timeout until every id is confirmed and returns their times, in order.
func (c *confirmLog) all(ctx context.Context, ids []int64, timeout time.Duration) ([]time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		missing := 0
		out := make([]time.Time, len(ids))
		for i, id := range ids {
			at, ok := c.at[id]
			if !ok {
				missing++
			}
			out[i] = at
		}
		c.mu.Unlock()
		switch {
		case missing == 0:
			return out, nil
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%d of %d committed messages not confirmed within %s", missing, len(ids), timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// middleware notes when the driver confirmed each message: when its publish returned
// nil for it (a router middleware, under the ordered chunking of ordered streams).
// Dead letters are not the bench's messages.
func (c *confirmLog) middleware(to router.Destination, next router.Sender) router.Sender {
	if to.DeadLetter {
		return next
	}
	return func(ctx context.Context, msgs []router.Message) []error {
		errs := next(ctx, msgs)
		c.record(msgs, errs, time.Now())
		return errs
	}
}
