// Package events defines what outboxd's loops report: one event per pipeline iteration,
// never one per message, so that observing delivery never costs delivery.
//
// Subscribers (metrics, tracing, logging, the dead-letter forwarder) turn events into
// series, spans and actions; the loops only emit. The Bus delivers them under one rule:
// emitting never waits for a slow subscriber (an asynchronous subscriber whose queue is
// full loses the event, counted), so observing delivery never stalls it.
//
// Package events is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package events

import "time"

// Event is anything a loop reports.
type Event interface{ event() }

// Iteration reports one claimed batch of one stream, from claim to write-back.
type Iteration struct {
	Stream    string
	Claimed   int
	Published int // confirmed by the broker and acknowledged in the table
	// Duplicates counts the published messages the broker confirmed as duplicates of a
	// message it already held under the same de-duplication id (a JetStream PubAck with
	// "duplicate"): normal for a re-publish after a lost answer; with no restarts or
	// broker trouble, a sign that de-duplication ids collide.
	Duplicates int
	Retried    int // refused by the broker; an attempt spent, back after a backoff
	Deferred   int // broker unreachable; no attempt spent
	Failed     int // failed for good (permanent error, attempts or max_defer exhausted)
	Released   int // handed back unpublished at shutdown
	// HeldBack counts messages of ordered streams handed back unsent, without an
	// attempt, because an earlier message of their key did not go through.
	HeldBack int
	// OrderViolations counts messages of ordered streams the broker confirmed although
	// an earlier message of their key in the same batch failed: the broker holds them
	// ahead of their predecessor. They are handed back, so that they are published again
	// after it. Only a broker refusing one message and accepting the next can cause it
	// (docs/ordering.md); the dispatcher's own order never does.
	OrderViolations int
	// FailReasons counts failures by the broker error kind that caused them.
	FailReasons map[string]int
	// ErrorKinds counts the broker's errors by kind (retryable, permanent, unreachable,
	// canceled).
	ErrorKinds map[string]int
	// DeliveryLags holds, per acknowledged message, the time from its INSERT to its
	// acknowledgement, both on the database clock.
	DeliveryLags []time.Duration
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

// FlowChanged reports a stream's pipeline starting or ending a flow: polling every
// millisecond while holding the stream's flow lock, which stops producers' inserts from
// notifying (dispatch/flow.go).
type FlowChanged struct {
	Stream  string
	Flowing bool
}

// ListenerState reports the notification listener connecting or losing its connection.
type ListenerState struct {
	Connected bool
	Err       error // why the connection was lost or could not be made
}

// MessageFailed reports one message that failed for good (permanent refusal, attempts
// or max_defer exhausted). Failures are rare, so this is the one per-message event; it
// carries what the dead-letter forwarder republishes. Payload and Headers are shared
// with the pipeline's batch and must not be modified.
type MessageFailed struct {
	Stream  string
	ID      int64
	Topic   string // the row's topic, before the stream's prefix
	Key     []byte
	Headers map[string]string
	Payload []byte
	// MessageID is the producer's message_id ("" when none) and DedupID the row's random
	// dedup_id: what the original publish was de-duplicated on.
	MessageID string
	DedupID   string
	Attempts  int    // attempts spent, this one included
	Reason    string // "permanent", "attempts_exhausted" or "max_defer"
	Err       string // the text stored in last_error
}

// MessageExpired reports one message a claim's expiry sweep marked expired: still
// pending when its expires_at, or its stream's ttl, ran out (docs/contract.md). Like
// MessageFailed it carries what the dead-letter forwarder republishes, shared and not
// to be modified; Err is the reason stored in last_error.
type MessageExpired struct {
	Stream    string
	ID        int64
	Topic     string // the row's topic, before the stream's prefix
	Key       []byte
	Headers   map[string]string
	Payload   []byte
	MessageID string
	DedupID   string
	Attempts  int // attempts spent before it expired
	Err       string
}

// LeasesReclaimed reports expired leases handed back to pending by the janitor.
type LeasesReclaimed struct {
	Count int
	// Overdue lists, per reclaimed row, how long its lease had been expired.
	Overdue []time.Duration
}

// Backlog is one stream's state, sampled by every replica.
type Backlog struct {
	Stream           string
	Pending          int64
	Leased           int64
	Failed           int64
	Deferred         int64 // pending rows whose broker was unreachable
	OldestPendingAge time.Duration
}

// BlockedKeys is the state of one ordered stream's keys held up by a failed head,
// sampled by every replica.
type BlockedKeys struct {
	Stream  string
	Keys    int64 // keys whose head failed for good and was not skipped
	Waiting int64 // messages waiting behind those heads
}

// ReplayProgress is the state of one stream's replays as the replays table records
// them, sampled by every replica: zeros included, so gauges return to 0 once a replay
// ends.
type ReplayProgress struct {
	Stream    string
	Running   int64 // replays running
	Remaining int64 // rows the running replays have yet to copy
	Copied    int64 // rows replays of the stream have copied, all time
}

// UnservedStreams lists, on every sample, the streams that have pending rows although
// this replica's configuration routes none of them: rows nobody delivers when every
// replica shares the configuration (a typo in a producer's stream, a stream not yet
// configured). Emitted empty when there are none, so that gauges return to zero.
type UnservedStreams struct {
	Streams []UnservedStream
}

// UnservedStream is one stream no pipeline of this replica drains.
type UnservedStream struct {
	Stream  string
	Pending int64
	// Oldest is how long the longest-waiting pending row has been due (0 when none is
	// due yet: every row is delayed into the future).
	Oldest time.Duration
}

// RetentionSwept reports one purge of delivered rows past retention.
type RetentionSwept struct {
	Deleted  int64
	Chunks   int
	Duration time.Duration
}

// PartitionChanged reports a partition created or dropped by the janitor.
type PartitionChanged struct {
	Partition string
	Created   bool // false: dropped
}

// DefaultPartitionRows reports rows that landed in the default partition (outside
// every range partition).
type DefaultPartitionRows struct {
	Rows int64
}

// JanitorCycle reports one janitor cycle; Skipped when another replica held the lock.
type JanitorCycle struct {
	Skipped  bool
	Duration time.Duration
	Err      error
}

// DeadLetterResult is the outcome of forwarding one failed message.
type DeadLetterResult string

// Dead-letter results.
const (
	DeadLetterForwardedOK DeadLetterResult = "forwarded"
	DeadLetterRetried     DeadLetterResult = "retried" // a forwarding attempt failed; it will be tried again
	DeadLetterGaveUp      DeadLetterResult = "gave_up" // forwarding abandoned (permanent refusal or shutdown)
	// DeadLetterDropped is not emitted by the forwarder: a failure that finds its queue
	// full never reaches it. The bus counts those (Bus.Dropped of its subscription).
	DeadLetterDropped DeadLetterResult = "dropped"
)

// DeadLetterForwarded reports one dead-letter forwarding outcome.
type DeadLetterForwarded struct {
	Stream string
	ID     int64
	Result DeadLetterResult
	Err    error
}

func (Iteration) event()      {}
func (ClaimFailed) event()    {}
func (BreakerChanged) event() {}
func (ListenerState) event()  {}
func (FlowChanged) event()    {}

func (MessageFailed) event()        {}
func (MessageExpired) event()       {}
func (LeasesReclaimed) event()      {}
func (Backlog) event()              {}
func (BlockedKeys) event()          {}
func (ReplayProgress) event()       {}
func (UnservedStreams) event()      {}
func (RetentionSwept) event()       {}
func (PartitionChanged) event()     {}
func (DefaultPartitionRows) event() {}
func (JanitorCycle) event()         {}
func (DeadLetterForwarded) event()  {}
