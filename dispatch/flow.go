package dispatch

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// A pipeline is parked or flowing. Parked, it waits for a notification (or its poll) after
// a claim that was not full: the cheapest way to hear of a message while few arrive, and
// the quickest. Flowing, while producers commit many transactions a second into its
// stream, it polls every flowPoll and holds the stream's flow lock (store.TryFlow), which
// keeps producers' inserts from notifying. PostgreSQL commits the transactions that sent a
// notification one at a time, through their WAL flush, so at a high rate of producer
// transactions the notifications, not the disk, capped how many they could commit
// (docs/benchmarks.md). A flow starts when the notifications for the stream, one per
// inserting statement, come faster than the pipeline's flow rate; every replica hears
// them all, and one pipeline of a stream flows at a time, across replicas (the lock).
// The others stay parked, and keep their polls.
//
// Producers that commit at once can never show that rate: their notifying commits queue
// for each other, and the rate a pipeline hears is the queue's, not what they offer (a
// burst of 1,000 a second from idle was heard at 140 to 370 a second for up to half a
// second, docs/benchmarks.md). What gives them away is a claim that finds several
// messages: one producer waiting on its own commits leaves one at a time. So a flow
// also starts at a quarter of the flow rate when the window's claims found more
// messages than there were claims. A flow ends after flowLinger without a message, or
// when a second of its claims found fewer than an eighth of the flow rate: polling every
// millisecond at a rate the notifications carried cheaply costs the server more than
// they did.
//
// Nothing is lost either way: a message is claimed by a poll if no notification comes.
// What a message may lose is latency, in one race: a producer's INSERT saw the lock held
// (so it did not notify) but its transaction committed more than flowGrace after the
// pipeline let the lock go. That message waits for the next poll (poll_interval).
const (
	flowPoll   = time.Millisecond       // wait after a claim that was not full, while flowing
	flowWindow = 100 * time.Millisecond // notifications are counted over at least this long
	flowLinger = 250 * time.Millisecond // a flow ends after this long without a message
	flowGrace  = 50 * time.Millisecond  // polling goes on this long after the lock is released
	flowRetry  = time.Second            // a flow lock not taken is not asked for again sooner
	flowSpan   = time.Second            // a flow's rate is counted over at least this long

	flowQueued = 4 // with claims finding several messages, a flow starts at rate / flowQueued
	flowSlack  = 8 // a flow ends below rate / flowSlack messages a second

	// DefaultFlowRate is PipelineConfig.FlowRate's default: 500 notifications a second.
	// Below it the notifications' serialised commits cost producers little, and a
	// notification reaches the pipeline sooner than a poll would.
	DefaultFlowRate = 500
)

// flow is a pipeline's parked or flowing state; only the pipeline's Run loop uses it,
// but for notes, which the listener adds to.
type flow struct {
	stream string
	rate   int                                                           // notifications a second that start a flow
	try    func(ctx context.Context, stream string) (*store.Lock, error) // nil: never flows
	log    *slog.Logger
	emit   Emitter

	notes       atomic.Int64 // notifications since windowStart
	rows        int          // messages claimed since windowStart
	hits        int          // claims since windowStart that returned messages
	lock        *store.Lock  // held while flowing
	windowStart time.Time    // since when notes, rows and hits count
	lastHit     time.Time    // when the last claim returned messages
	pollUntil   time.Time    // polling continues until then after a flow ended
	noTryTill   time.Time    // no flow lock is asked for before then
}

// notified counts a notification for the stream.
func (f *flow) notified() { f.notes.Add(1) }

// claimed records a claim that returned n messages (0 for an empty or failed claim, or
// none made) and starts or ends a flow accordingly.
func (f *flow) claimed(ctx context.Context, now time.Time, n int) {
	if f.try == nil {
		return
	}
	if n > 0 {
		f.lastHit = now
		f.rows += n
		f.hits++
	}
	span := now.Sub(f.windowStart)
	if f.lock != nil {
		slow := span >= flowSpan && float64(f.rows) < float64(f.rate)/flowSlack*span.Seconds()
		if now.Sub(f.lastHit) > flowLinger || slow {
			f.stop(ctx)
			f.pollUntil = now.Add(flowGrace)
			f.restart(now)
		} else if span >= flowSpan {
			f.restart(now)
		}
		return
	}
	if span >= flowWindow {
		perSec := float64(f.notes.Swap(0)) / span.Seconds()
		queued := f.rows > f.hits && perSec >= float64(f.rate)/flowQueued
		f.restart(now)
		if (perSec >= float64(f.rate) || queued) && n > 0 && !now.Before(f.noTryTill) {
			f.start(ctx, now)
		}
	}
}

// restart opens a new window at now.
func (f *flow) restart(now time.Time) {
	f.windowStart = now
	f.notes.Store(0)
	f.rows, f.hits = 0, 0
}

// wait is how long to wait for news after a claim that was not full.
func (f *flow) wait(now time.Time, poll time.Duration) time.Duration {
	if f.lock != nil || now.Before(f.pollUntil) {
		return flowPoll
	}
	return jitter(poll)
}

// flowing reports whether the pipeline holds its stream's flow lock.
func (f *flow) flowing() bool { return f.lock != nil }

func (f *flow) start(ctx context.Context, now time.Time) {
	lock, err := f.try(ctx, f.stream)
	if err != nil && ctx.Err() == nil {
		f.log.Warn("could not ask for the flow lock; notifications stay on", "err", err)
	}
	if lock == nil {
		f.noTryTill = now.Add(flowRetry) // held by another replica's pipeline, or no database
		return
	}
	f.lock = lock
	f.restart(now) // the flow's rate is counted from its start
	f.emit.Emit(events.FlowChanged{Stream: f.stream, Flowing: true})
	f.log.Debug("flowing: polling every " + flowPoll.String() + ", producers stop notifying")
}

// park ends a flow, if any, at once and keeps one from starting until flowRetry has
// passed: the pipeline is about to stop polling every millisecond (its breaker is not
// closed, a claim failed, its batch slots stay busy, or shutdown began), and while it
// holds the lock producers would not notify anyone. Polling goes on for flowGrace, as
// after a flow's linger.
func (f *flow) park(ctx context.Context, now time.Time) {
	if f.try == nil {
		return
	}
	if f.lock != nil {
		f.stop(ctx)
		f.pollUntil = now.Add(flowGrace)
	}
	f.restart(now)
	f.noTryTill = now.Add(flowRetry)
}

// stop releases the flow lock, if held; producers notify again.
func (f *flow) stop(ctx context.Context) {
	if f.lock == nil {
		return
	}
	f.lock.Release(ctx)
	f.lock = nil
	f.emit.Emit(events.FlowChanged{Stream: f.stream, Flowing: false})
	f.log.Debug("parked: waiting for notifications again")
}
