package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

// Headers a dead-lettered message carries besides the producer's own and the driver's
// Outbox-Id and Outbox-Stream (the original row's id and stream).
const (
	HeaderDeadLetterStream   = "Outbox-Dead-Letter-Stream"
	HeaderDeadLetterTopic    = "Outbox-Dead-Letter-Topic" // the row's topic, before the stream's prefix
	HeaderDeadLetterAttempts = "Outbox-Dead-Letter-Attempts"
	HeaderDeadLetterReason   = "Outbox-Dead-Letter-Reason" // permanent, attempts_exhausted, max_defer or expired
	HeaderDeadLetterError    = "Outbox-Dead-Letter-Error"  // the row's last_error
)

// DeadLetterRoute sends the failed messages of Stream to Topic (the full destination:
// no stream prefix is applied) through Publisher: the router's dead-letter publisher of
// the stream (router.Router.DeadLetter), so that a dead letter leaves as every message
// does, through the router's middlewares and its one-result-per-message guard.
type DeadLetterRoute struct {
	Stream    string
	Topic     string
	Publisher Publisher
	// Expired forwards the stream's expired messages too (events.MessageExpired), with
	// reason "expired" (streams.<name>.dead_letter.expired).
	Expired bool
}

// DeadLetterConfig is the forwarder's routes (one per stream at most; a later route for
// the same stream wins) and tuning; zero durations take the defaults noted.
type DeadLetterConfig struct {
	Routes         []DeadLetterRoute
	BackoffInitial time.Duration // first pause after a failed forwarding attempt (500ms)
	BackoffMax     time.Duration // longest pause (30s)
	PublishTimeout time.Duration // bound on one forwarding attempt (10s)
}

// DeadLetterForwarder republishes messages that failed for good to their stream's
// dead-letter destination. It runs as an asynchronous bus subscriber and never touches
// the database: the row stays failed whatever happens here, so dead-lettering is a copy
// for whoever watches the destination, not a change of the row's fate.
//
// Messages are forwarded one at a time, in the order they failed. A forwarding error
// that may pass (retryable, unreachable, timed out) is retried with exponential backoff
// until it succeeds or Close; meanwhile later failures wait in the bus queue, which is
// bounded: when it is full the bus drops them and counts them (Bus.Dropped for this
// subscriber), so a dead-letter broker that stays down loses dead-letter copies, never
// rows. A permanent error gives the message up at once.
//
// Subscribe it with its filter so the queue holds only what it forwards:
//
//	bus.SubscribeAsync("deadletter", 1024, f.Handle, events.Filter(f.Wants))
type DeadLetterForwarder struct {
	routes map[string]DeadLetterRoute
	emit   Emitter
	log    *slog.Logger
	opts   DeadLetterConfig
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	// closedLogged: messages handled after Close are given up with one log line, not one each.
	closedLogged atomic.Bool
}

// NewDeadLetterForwarder builds a forwarder for cfg.Routes; a route without a publisher
// is a wiring error and panics. Outcomes are reported to emit, which may be the bus the forwarder subscribes
// to (Emit never blocks, so a handler emitting to its own bus cannot deadlock). emit and
// logger may be nil.
func NewDeadLetterForwarder(cfg DeadLetterConfig, emit Emitter, logger *slog.Logger) *DeadLetterForwarder {
	emit, logger = orDiscard(emit, logger)
	opts := cfg
	if opts.BackoffInitial <= 0 {
		opts.BackoffInitial = 500 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = 10 * time.Second
	}
	f := &DeadLetterForwarder{
		routes: make(map[string]DeadLetterRoute, len(cfg.Routes)),
		emit:   emit,
		log:    logger,
		opts:   opts,
	}
	for _, r := range cfg.Routes {
		if r.Publisher == nil {
			panic(fmt.Sprintf("dispatch: dead-letter route of stream %q has no publisher", r.Stream))
		}
		f.routes[r.Stream] = r
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

// Wants reports whether Handle would forward e: a MessageFailed of a stream with a
// route, or a MessageExpired of a stream whose route takes them. It is cheap and never blocks, as a bus filter must be.
func (f *DeadLetterForwarder) Wants(e events.Event) bool {
	_, _, ok := f.route(e)
	return ok
}

// route returns the message e asks to forward and its route: a MessageFailed of a
// routed stream, or a MessageExpired of a stream whose route takes expired messages
// (as a MessageFailed with reason "expired"). ok is false for anything else.
func (f *DeadLetterForwarder) route(e events.Event) (events.MessageFailed, DeadLetterRoute, bool) {
	var m events.MessageFailed
	switch e := e.(type) {
	case events.MessageFailed:
		m = e
	case events.MessageExpired:
		m = events.MessageFailed{Stream: e.Stream, ID: e.ID, Topic: e.Topic, Key: e.Key,
			Headers: e.Headers, Payload: e.Payload, MessageID: e.MessageID, DedupID: e.DedupID,
			Attempts: e.Attempts, Reason: reasonExpired, Err: e.Err}
	default:
		return m, DeadLetterRoute{}, false
	}
	route, ok := f.routes[m.Stream]
	if !ok || (m.Reason == reasonExpired && !route.Expired) {
		return m, DeadLetterRoute{}, false
	}
	return m, route, true
}

// Handle forwards e if it is a MessageFailed of a routed stream (or a MessageExpired
// its route takes) and ignores anything else. It returns when the message is
// forwarded, given up, or Close was called.
func (f *DeadLetterForwarder) Handle(e events.Event) {
	m, route, ok := f.route(e)
	if !ok {
		return
	}
	if f.ctx.Err() != nil {
		f.emit.Emit(events.DeadLetterForwarded{Stream: m.Stream, ID: m.ID, Result: events.DeadLetterGaveUp, Err: errClosed})
		if f.closedLogged.CompareAndSwap(false, true) {
			f.log.Warn("dead-letter forwarder closed: messages still queued are given up (their rows stay failed)",
				"stream", m.Stream, "id", m.ID)
		}
		return
	}
	msg := deadLetterMessage(route, m)
	for attempt := 1; ; attempt++ {
		err := f.publish(route, msg)
		if err == nil {
			f.emit.Emit(events.DeadLetterForwarded{Stream: m.Stream, ID: m.ID, Result: events.DeadLetterForwardedOK})
			if attempt > 1 {
				f.log.Info("dead letter forwarded after retries", "stream", m.Stream, "id", m.ID, "attempts", attempt)
			}
			return
		}
		if f.ctx.Err() != nil {
			f.giveUp(m, attempt, fmt.Errorf("%w while forwarding: %w", errClosed, err))
			return
		}
		if router.KindOf(err) == router.KindPermanent {
			f.giveUp(m, attempt, err)
			return
		}
		f.emit.Emit(events.DeadLetterForwarded{Stream: m.Stream, ID: m.ID, Result: events.DeadLetterRetried, Err: err})
		pause := backoff(f.opts.BackoffInitial, f.opts.BackoffMax, attempt)
		if attempt == 1 || attempt%20 == 0 {
			f.log.Warn("dead letter not forwarded; retrying", "stream", m.Stream, "id", m.ID,
				"topic", route.Topic, "attempt", attempt, "pause", pause, "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-f.ctx.Done():
			t.Stop()
			f.giveUp(m, attempt, fmt.Errorf("%w while retrying: %w", errClosed, err))
			return
		}
	}
}

var errClosed = errors.New("dead-letter forwarder closed")

// publish makes one forwarding attempt, bounded by the publish timeout and Close.
func (f *DeadLetterForwarder) publish(route DeadLetterRoute, msg router.Message) error {
	ctx, cancel := context.WithTimeout(f.ctx, f.opts.PublishTimeout)
	defer cancel()
	errs := route.Publisher.Publish(ctx, []router.Message{msg})
	if len(errs) != 1 {
		return router.Retryable(fmt.Errorf("dead-letter publisher returned %d results for 1 message", len(errs)))
	}
	return errs[0]
}

func (f *DeadLetterForwarder) giveUp(m events.MessageFailed, attempts int, err error) {
	f.emit.Emit(events.DeadLetterForwarded{Stream: m.Stream, ID: m.ID, Result: events.DeadLetterGaveUp, Err: err})
	f.log.Error("dead letter given up; the row keeps its status (failed or expired) in the outbox table", "stream", m.Stream, "id", m.ID,
		"reason", m.Reason, "attempts", attempts, "err", err)
}

// Close stops forwarding: a retry in progress is given up (reported), and so is every
// message handled afterwards. It does not wait for Handle to return; the bus's Close
// does that. Close is idempotent.
func (f *DeadLetterForwarder) Close() { f.cancel() }

// oneLine is s with every run of CR and LF made one space and surrounding whitespace
// trimmed: the topic and error a dead letter reports are for reading, and NATS drivers
// refuse a header value it would otherwise have to rewrite, which would lose the dead
// letter for the sake of a line break.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }), " ")
	}
	return strings.TrimSpace(s)
}

// deadLetterMessage is m as its dead-letter copy: the original payload, key and
// headers, plus the dead-letter headers. It keeps the original id and stream, which the
// driver sends as Outbox-Id and Outbox-Stream. Its de-duplication id (Outbox-Message-Id,
// Nats-Msg-Id) is "dead-letter-", the row's random dedup_id and a random suffix drawn once
// per failure. It is never the original's id: a dead-letter destination in the same
// JetStream stream as the original would drop the copy as a duplicate of it. It is not
// the row id either, which repeats across outbox tables and databases sharing one
// dead-letter stream. Every retry of one forwarding carries the same id, so JetStream
// keeps one copy even when an attempt that looked failed had landed, while the same row
// failing again after a requeue (which resets its attempts) is a new dead letter.
func deadLetterMessage(route DeadLetterRoute, m events.MessageFailed) router.Message {
	h := make(map[string]string, len(m.Headers)+5)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderDeadLetterStream] = m.Stream
	h[HeaderDeadLetterTopic] = oneLine(m.Topic)
	h[HeaderDeadLetterAttempts] = strconv.Itoa(m.Attempts)
	h[HeaderDeadLetterReason] = m.Reason
	h[HeaderDeadLetterError] = oneLine(m.Err)
	origin := m.DedupID
	if origin == "" { // an event not built from a claimed row (tests)
		origin = strconv.FormatInt(m.ID, 10)
	}
	return router.Message{
		ID: m.ID, Stream: m.Stream, Topic: route.Topic, Key: m.Key, Headers: h, Payload: m.Payload,
		MessageID: "dead-letter-" + origin + "-" + strconv.FormatUint(rand.Uint64(), 36),
	}
}
