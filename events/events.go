// Package events defines what outboxd's loops report: one event per pipeline iteration,
// never one per message, so that observing delivery never costs delivery.
//
// Subscribers (metrics, tracing, logging, the dead-letter forwarder) turn events into
// series, spans and actions; the loops only emit.
package events

import "time"

// Event is anything a loop reports.
type Event interface{ event() }

// Iteration reports one claimed batch of one stream, from claim to write-back.
type Iteration struct {
	Stream    string
	Claimed   int
	Published int // confirmed by the broker and acknowledged in the table
	Retried   int // refused by the broker; an attempt spent, back after a backoff
	Deferred  int // broker unreachable; no attempt spent
	Failed    int // failed for good (permanent error, attempts or max_defer exhausted)
	Released  int // handed back unpublished at shutdown
	// FailReasons counts failures by the broker error kind that caused them.
	FailReasons map[string]int
	// LeaseConflicts counts write-backs refused because the lease had moved on (the
	// batch outlived its lease and the row was reclaimed or claimed again).
	LeaseConflicts int
	Claim          time.Duration
	Publish        time.Duration
	WriteBack      time.Duration
	// Err is set when the iteration could not complete its write-back.
	Err error
}

// ClaimFailed reports a claim that did not reach the database or was refused by it.
type ClaimFailed struct {
	Stream string
	Err    error
}

// BreakerState is the state of a stream's circuit breaker.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "closed"    // claiming normally
	BreakerOpen     BreakerState = "open"      // broker unreachable: not claiming
	BreakerHalfOpen BreakerState = "half-open" // trying one small claim
)

// BreakerChanged reports a stream's breaker moving between states.
type BreakerChanged struct {
	Stream string
	From   BreakerState
	To     BreakerState
	// Pause is how long the breaker stays open before its next trial (open only).
	Pause time.Duration
}

// ListenerState reports the notification listener connecting or losing its connection.
type ListenerState struct {
	Connected bool
	Err       error // why the connection was lost or could not be made
}

func (Iteration) event()      {}
func (ClaimFailed) event()    {}
func (BreakerChanged) event() {}
func (ListenerState) event()  {}
