package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// A pipeline is parked or flowing. Parked, it waits for a notification (or its poll) after
// a claim that was not full: the cheapest way to hear of a message while few arrive.
// Flowing, while a stream's messages arrive quickly, it polls every flowPoll and holds the
// stream's flow lock (store.TryFlow), which keeps producers' inserts from notifying.
// PostgreSQL commits the transactions that sent a notification one at a time, through
// their WAL flush, so at a high rate of producer transactions the notifications, not the
// disk, capped how many they could commit (docs/benchmarks.md). One pipeline of a stream
// flows at a time, across replicas; the others stay parked and keep their polls.
//
// Nothing is lost either way: a message is claimed by a poll if no notification comes.
// What a message may lose is latency, in one race: a producer's INSERT saw the lock held
// (so it did not notify) but its transaction committed more than flowGrace after the
// pipeline let the lock go. That message waits for the next poll (poll_interval).
const (
	flowPoll   = 2 * time.Millisecond   // wait after a claim that was not full, while flowing
	flowEnter  = 10                     // messages claimed within one flowWindow that start a flow
	flowWindow = 100 * time.Millisecond // (100 messages/s: polling every flowPoll then costs at
	//                                     most five claims per message, and usually less)
	flowLinger = 250 * time.Millisecond // a flow ends after this long without a message
	flowGrace  = 50 * time.Millisecond  // polling goes on this long after the lock is released
	flowRetry  = time.Second            // a flow lock not taken is not asked for again sooner
)

// flow is a pipeline's parked or flowing state; only the pipeline's Run loop uses it.
type flow struct {
	stream string
	try    func(ctx context.Context, stream string) (*store.Lock, error) // nil: never flows
	log    *slog.Logger
	emit   Emitter

	lock        *store.Lock // held while flowing
	windowStart time.Time   // start of the flowWindow messages are being counted in
	inWindow    int         // messages claimed since windowStart
	lastHit     time.Time   // when the last claim returned messages
	pollUntil   time.Time   // polling continues until then after a flow ended
	noTryTill   time.Time   // no flow lock is asked for before then
}

// claimed records a claim that returned n messages (0 for an empty or failed claim, or
// none made) and starts or ends a flow accordingly.
func (f *flow) claimed(ctx context.Context, now time.Time, n int) {
	if f.try == nil {
		return
	}
	if n > 0 {
		f.lastHit = now
		if now.Sub(f.windowStart) > flowWindow {
			f.windowStart, f.inWindow = now, 0
		}
		f.inWindow += n
		if f.lock == nil && f.inWindow >= flowEnter && !now.Before(f.noTryTill) {
			f.start(ctx, now)
		}
		return
	}
	if f.lock != nil && now.Sub(f.lastHit) > flowLinger {
		f.stop(ctx)
		f.pollUntil = now.Add(flowGrace)
	}
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
	f.emit.Emit(events.FlowChanged{Stream: f.stream, Flowing: true})
	f.log.Debug("flowing: polling every " + flowPoll.String() + ", producers stop notifying")
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
