package dispatch

import (
	"time"

	"github.com/outboxd/outboxd/events"
)

// breaker stops a stream from claiming while its broker is unreachable. After
// threshold consecutive batches in which nothing reached the broker it opens for a
// pause; then one small trial claim goes out (half-open); a trial that reaches the
// broker closes it, one that does not reopens it with the pause doubled up to max.
// It is used by one pipeline goroutine at a time (guarded by the pipeline's mutex).
type breaker struct {
	threshold int
	initial   time.Duration
	max       time.Duration

	state    events.BreakerState
	failures int           // consecutive unreachable batches while closed
	pause    time.Duration // current open pause
	until    time.Time     // end of the open pause
	trialOut bool          // a half-open trial is in flight
}

func newBreaker(threshold int, initial, maxPause time.Duration) *breaker {
	return &breaker{threshold: threshold, initial: initial, max: maxPause, state: events.BreakerClosed}
}

// allow says whether a claim may start now and how many rows it may take; when it may
// not, wait is how long until it may.
func (b *breaker) allow(now time.Time, batch int) (limit int, wait time.Duration, change *events.BreakerChanged) {
	switch b.state {
	case events.BreakerOpen:
		if now.Before(b.until) {
			return 0, b.until.Sub(now), nil
		}
		change = b.move(events.BreakerHalfOpen)
		fallthrough
	case events.BreakerHalfOpen:
		if b.trialOut {
			return 0, b.initial, change
		}
		b.trialOut = true
		return 1, 0, change
	}
	return batch, 0, nil
}

// record takes the outcome of one batch: reached says whether any message reached the
// broker (published, refused or failed by it), unreachable whether any could not.
func (b *breaker) record(now time.Time, reached, unreachable bool) *events.BreakerChanged {
	switch {
	case b.state == events.BreakerHalfOpen && b.trialOut:
		b.trialOut = false
		if reached || !unreachable {
			b.failures, b.pause = 0, 0
			return b.move(events.BreakerClosed)
		}
		return b.open(now)
	case b.state != events.BreakerClosed:
		return nil // a batch claimed before the breaker opened; the trial decides
	case reached:
		b.failures = 0
	case unreachable:
		b.failures++
		if b.failures >= b.threshold {
			return b.open(now)
		}
	}
	return nil
}

// cancelTrial forgets a trial that ended without an outcome (claim error, empty claim).
func (b *breaker) cancelTrial() { b.trialOut = false }

// deferFor is how long rows that could not reach the broker should wait.
func (b *breaker) deferFor() time.Duration {
	if b.pause > b.initial {
		return b.pause
	}
	return b.initial
}

func (b *breaker) open(now time.Time) *events.BreakerChanged {
	if b.pause == 0 {
		b.pause = b.initial
	} else if b.pause *= 2; b.pause > b.max {
		b.pause = b.max
	}
	b.until = now.Add(b.pause)
	b.failures = 0
	c := b.move(events.BreakerOpen)
	if c == nil {
		c = &events.BreakerChanged{From: events.BreakerOpen, To: events.BreakerOpen}
	}
	c.Pause = b.pause
	return c
}

func (b *breaker) move(to events.BreakerState) *events.BreakerChanged {
	if b.state == to {
		return nil
	}
	c := &events.BreakerChanged{From: b.state, To: to}
	b.state = to
	return c
}
