package router

import (
	"context"
	"errors"
	"time"
)

// Kind says what a failed publish costs.
type Kind int

const (
	// KindRetryable: the broker refused this time; try again after a backoff, spending
	// an attempt. Unclassified errors are retryable.
	KindRetryable Kind = iota
	// KindPermanent: the broker will never accept this message (too large, invalid
	// destination, not authorised); fail it at once with the reason.
	KindPermanent
	// KindUnreachable: the broker was not reached and never saw the message; try again
	// when it is back, without spending an attempt.
	KindUnreachable
	// KindCanceled: our own context ended before the outcome was known (shutdown);
	// hand the message back unchanged.
	KindCanceled
	// KindHeldBack: not sent, because an earlier message of its key in an ordered
	// stream did not go through; hand it back unchanged, without spending an attempt.
	KindHeldBack
)

func (k Kind) String() string {
	switch k {
	case KindRetryable:
		return "retryable"
	case KindPermanent:
		return "permanent"
	case KindUnreachable:
		return "unreachable"
	case KindCanceled:
		return "canceled"
	case KindHeldBack:
		return "held_back"
	}
	return "unknown"
}

// Error is a classified publish error.
type Error struct {
	Kind Kind
	Err  error
	// RetryAfter, when positive, is how long the broker asked us to wait before trying
	// again (an HTTP Retry-After): a retryable message is not published again sooner.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Kind.String() + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Permanent classifies err as permanent.
func Permanent(err error) error { return &Error{Kind: KindPermanent, Err: err} }

// Retryable classifies err as retryable.
func Retryable(err error) error { return &Error{Kind: KindRetryable, Err: err} }

// RetryableAfter classifies err as retryable, not to be tried again before wait has
// passed.
func RetryableAfter(err error, wait time.Duration) error {
	return &Error{Kind: KindRetryable, Err: err, RetryAfter: wait}
}

// RetryAfterOf returns the wait a classified err asked for, or 0.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	return 0
}

// Unreachable classifies err as unreachable.
func Unreachable(err error) error { return &Error{Kind: KindUnreachable, Err: err} }

// Canceled classifies err as the end of our own context.
func Canceled(err error) error { return &Error{Kind: KindCanceled, Err: err} }

// HeldBack classifies err as a message not sent because its key's predecessor failed.
func HeldBack(err error) error { return &Error{Kind: KindHeldBack, Err: err} }

// KindOf returns the kind of a publish error: its classification when a driver gave
// one; canceled for a bare context error; retryable otherwise.
func KindOf(err error) Kind {
	if e, ok := errors.AsType[*Error](err); ok { // errors.As would put a target on the heap per call
		return e.Kind
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return KindCanceled
	}
	return KindRetryable
}

// ErrClosed is returned, classified unreachable, for every message published after
// Close: the broker never saw the message, so it costs no attempt.
var ErrClosed = errors.New("driver closed")
