package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// outcomes sorts one batch's publish results into the write-backs they need.
type outcomes struct {
	acks       []int64
	retries    []store.Retry
	defers     []store.Deferral
	fails      []store.Failure
	releases   []int64
	heldBack   []int64          // ordered streams: handed back behind a key's failed message
	violations int              // ordered streams: confirmed behind a key's failed message
	reasons    map[string]int   // failures counted by reason
	errorKinds map[string]int   // broker errors counted by kind
	reasonOf   map[int64]string // each failed message's reason
	reached    bool             // some message reached the broker
	missed     bool             // some message could not reach it
}

// process publishes one claimed batch and writes back every outcome.
func (p *Pipeline) process(ctx, hard context.Context, claim store.Claim, claimTime time.Duration) {
	msgs := make([]router.Message, len(claim.Messages))
	for i, m := range claim.Messages {
		msgs[i] = router.Message{
			ID: m.ID, Stream: m.Stream, Topic: m.Topic, Key: m.Key,
			Headers: m.Headers, Payload: m.Payload, MessageID: m.MessageID, RowDedupID: m.DedupID,
			Attempts: m.Attempts, CreatedAt: m.CreatedAt,
		}
	}
	pubCtx, cancel := context.WithTimeout(hard, p.cfg.PublishTimeout)
	var duplicates atomic.Int64 // confirmed as duplicates by the broker (JetStream)
	pubCtx = router.WithDuplicates(pubCtx, &duplicates)
	start := p.now()
	var errs []error
	if p.ordered != nil {
		errs = p.ordered.PublishOrdered(pubCtx, msgs)
	} else {
		errs = p.pub.Publish(pubCtx, msgs)
	}
	publishTime := p.now().Sub(start)
	cancel()

	p.mu.Lock()
	deferFor := p.breaker.deferFor()
	p.mu.Unlock()
	o := p.classify(claim.Messages, errs, ctx.Err() != nil, deferFor)
	if o.reached || o.missed {
		p.mu.Lock()
		change := p.breaker.record(p.now(), o.reached, o.missed)
		p.mu.Unlock()
		p.report(change)
	} else {
		p.mu.Lock()
		p.breaker.cancelTrial()
		p.mu.Unlock()
	}

	start = p.now()
	var ev events.Iteration
	if p.cfg.Transaction {
		ev = p.writeBackHeld(ctx, claim, o)
	} else {
		ev = p.writeBack(ctx, claim, o)
	}
	ev.Claim, ev.Publish, ev.WriteBack = claimTime, publishTime, p.now().Sub(start)
	ev.Stream, ev.Claimed = p.cfg.Stream, len(claim.Messages)
	ev.Duplicates = int(duplicates.Load())
	p.emit.Emit(ev)
	if p.ordered != nil {
		// An ordered claim passes over keys whose head is leased, so the messages behind
		// this batch's keys were left for now; nothing else would say they are due.
		p.wakeUp()
	}
}

// classify maps each message's publish result to its write-back.
func (p *Pipeline) classify(batch []store.Message, errs []error, shuttingDown bool, deferFor time.Duration) outcomes {
	o := outcomes{acks: make([]int64, 0, len(batch))}
	fail := func(m store.Message, reason, text string, attempted bool) {
		o.fails = append(o.fails, store.Failure{ID: m.ID, Err: text, Attempted: attempted})
		if o.reasons == nil {
			o.reasons, o.reasonOf = map[string]int{}, map[int64]string{}
		}
		o.reasons[reason]++
		o.reasonOf[m.ID] = reason
	}
	retry := func(m store.Message, err error) {
		attempt := m.Attempts + 1
		if attempt >= p.cfg.MaxAttempts {
			fail(m, "attempts_exhausted", fmt.Sprintf("gave up after %d attempts: %v", attempt, err), true)
			return
		}
		// A broker that said how long to wait (HTTP Retry-After) is not asked sooner.
		delay := max(backoff(p.cfg.BackoffInitial, p.cfg.BackoffMax, attempt), router.RetryAfterOf(err))
		o.retries = append(o.retries, store.Retry{ID: m.ID, Delay: delay, Err: err.Error()})
	}
	var stopped map[string]bool // ordered streams: keys stopped at a message that did not go
	for i, m := range batch {
		err := errs[i]
		if p.ordered != nil && m.Key != nil {
			if stopped[string(m.Key)] {
				// Behind a message of its key that did not go through: hand it back to
				// be published after that one, whatever its own outcome. Confirmed
				// anyway means the broker holds it ahead of its predecessor.
				if err == nil {
					o.violations++
					o.reached = true
				}
				o.heldBack = append(o.heldBack, m.ID)
				continue
			}
			if err != nil {
				if stopped == nil {
					stopped = map[string]bool{}
				}
				stopped[string(m.Key)] = true
			}
		}
		if err == nil {
			o.acks = append(o.acks, m.ID)
			o.reached = true
			continue
		}
		kind := router.KindOf(err)
		if o.errorKinds == nil {
			o.errorKinds = map[string]int{}
		}
		o.errorKinds[kind.String()]++
		switch kind {
		case router.KindPermanent:
			o.reached = true
			fail(m, "permanent", err.Error(), true)
		case router.KindUnreachable:
			o.missed = true
			o.defers = append(o.defers, store.Deferral{ID: m.ID, Delay: deferFor, Err: err.Error()})
		case router.KindHeldBack:
			o.heldBack = append(o.heldBack, m.ID)
		case router.KindCanceled:
			if shuttingDown {
				o.releases = append(o.releases, m.ID)
				continue
			}
			o.reached = true
			retry(m, fmt.Errorf("publish did not complete within %s: %w", p.cfg.PublishTimeout, err))
		default:
			o.reached = true
			retry(m, err)
		}
	}
	return o
}

// writeBack applies the outcomes, each in one lease-checked statement. Write-backs run
// even after shutdown began (they are what makes shutdown safe). Each statement is sent
// at least once, on a deadline of its own, even when the process was paused (SIGSTOP, a
// long GC pause, a frozen VM) for longer than the lease: the lease check then decides,
// so rows another replica took over are refused and counted as lease conflicts, and
// rows nobody took over are still written back instead of being published again. A
// failing database is retried until the lease would have expired, after which the rows
// are left for lease reclaiming.
func (p *Pipeline) writeBack(ctx context.Context, claim store.Claim, o outcomes) events.Iteration {
	ev := events.Iteration{FailReasons: o.reasons, ErrorKinds: o.errorKinds, OrderViolations: o.violations}
	base := context.WithoutCancel(ctx)
	deadline := p.now().Add(p.cfg.LeaseTTL)
	wctx, cancel := context.WithDeadline(base, deadline)
	defer cancel()
	t := claim.Token
	var failed []store.FailedRow // rows failed for good, as stored, for MessageFailed
	failReason := make(map[int64]string, len(o.fails))
	steps := []struct {
		n     int
		write func(ctx context.Context, again bool) (store.WriteResult, error)
		count *int
	}{
		{len(o.acks), func(wctx context.Context, again bool) (store.WriteResult, error) {
			ack := p.store.Ack
			if again {
				// The earlier try may have applied: its rows are ours, not conflicts.
				ack = func(ctx context.Context, t store.Token, ids []int64) (store.AckResult, error) {
					return p.store.AckAgain(ctx, t, p.cfg.Owner, claim.LeaseUntil, ids)
				}
			}
			res, err := ack(wctx, t, o.acks)
			ev.DeliveryLags = res.Lags
			res.Changed += res.Already // published and acknowledged, by the earlier try
			return res.WriteResult, err
		}, &ev.Published},
		{len(o.fails), func(wctx context.Context, _ bool) (store.WriteResult, error) {
			res, err := p.store.Fail(wctx, t, o.fails)
			failed = append(failed, res.Rows...)
			return res.WriteResult, err
		}, &ev.Failed},
		{len(o.retries), func(wctx context.Context, _ bool) (store.WriteResult, error) {
			return p.store.Retry(wctx, t, o.retries)
		}, &ev.Retried},
		{len(o.defers), func(wctx context.Context, _ bool) (store.WriteResult, error) {
			res, err := p.store.Defer(wctx, t, o.defers, p.cfg.MaxDefer)
			failed = append(failed, res.Expired...)
			res.Changed -= deferExpired(res, failReason, &ev)
			return res.WriteResult, err
		}, &ev.Deferred},
		{len(o.releases), func(wctx context.Context, _ bool) (store.WriteResult, error) {
			return p.store.Release(wctx, t, o.releases)
		}, &ev.Released},
		{len(o.heldBack), func(wctx context.Context, _ bool) (store.WriteResult, error) {
			return p.store.Release(wctx, t, o.heldBack)
		}, &ev.HeldBack},
	}
	for _, s := range steps {
		if s.n == 0 {
			continue
		}
		res, err := p.retryWrite(base, wctx, s.write)
		if err != nil {
			ev.Err = errors.Join(ev.Err, err)
			p.log.Error("write-back failed; rows stay leased until their lease expires", "rows", s.n, "err", err)
			continue
		}
		*s.count += res.Changed
		ev.LeaseConflicts += res.Refused
	}
	if o.violations > 0 {
		p.log.Error("the broker confirmed messages of an ordered stream behind a failed message of their key; they will be published again after it",
			"messages", o.violations)
	}
	if ev.LeaseConflicts > 0 {
		p.log.Warn("write-back refused: lease moved on (the batch outlived its lease)", "rows", ev.LeaseConflicts)
	}
	p.reportFailed(claim, o, failed, failReason)
	return ev
}

// deferExpired records the rows a deferral failed for good because max_defer passed:
// their reason for MessageFailed and ev's failure counts. It returns how many there were.
func deferExpired(res store.DeferResult, failReason map[int64]string, ev *events.Iteration) int {
	for _, r := range res.Expired {
		failReason[r.ID] = "max_defer"
	}
	n := len(res.Expired)
	if n > 0 {
		ev.Failed += n
		if ev.FailReasons == nil {
			ev.FailReasons = map[string]int{}
		}
		ev.FailReasons["max_defer"] += n
	}
	return n
}

// reportFailed emits one MessageFailed per row this batch failed for good, exactly as
// the table now holds it. Only rows the write-back changed are reported: a row whose
// lease moved on belongs to another replica, which reports it if it fails it.
func (p *Pipeline) reportFailed(claim store.Claim, o outcomes, failed []store.FailedRow, reason map[int64]string) {
	if len(failed) == 0 {
		return
	}
	for _, f := range o.fails {
		if _, ok := reason[f.ID]; !ok {
			reason[f.ID] = o.reasonOf[f.ID]
		}
	}
	byID := make(map[int64]int, len(claim.Messages))
	for i, m := range claim.Messages {
		byID[m.ID] = i
	}
	for _, r := range failed {
		i, ok := byID[r.ID]
		if !ok {
			continue
		}
		m := claim.Messages[i]
		p.emit.Emit(events.MessageFailed{
			Stream: m.Stream, ID: m.ID, Topic: m.Topic, Key: m.Key, Headers: m.Headers, Payload: m.Payload,
			MessageID: m.MessageID, DedupID: m.DedupID, Attempts: r.Attempts, Reason: reason[r.ID], Err: r.LastError,
		})
	}
}

// retryWrite runs write until it succeeds or ctx ends, pausing between tries. A write
// that ctx's end kept from the database (the deadline passed before or during the try,
// as when the process was paused) gets one more try on a deadline of its own derived
// from base: a write-back must reach the database once for the lease check to judge it.
// write is told again on every try after the first: a try that failed may still have
// been applied (its answer lost), which the next one then finds done.
func (p *Pipeline) retryWrite(base, ctx context.Context, write func(ctx context.Context, again bool) (store.WriteResult, error)) (store.WriteResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := write(ctx, attempt > 1)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			last, cancel := context.WithTimeout(base, lastWriteTimeout)
			defer cancel()
			return write(last, true)
		}
		if attempt == 1 {
			p.log.Warn("write-back failed; retrying", "err", err)
		}
		t := time.NewTimer(backoff(50*time.Millisecond, 2*time.Second, attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// lastWriteTimeout bounds the one try a write-back gets after its deadline passed.
const lastWriteTimeout = 10 * time.Second
