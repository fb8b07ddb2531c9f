// Package router sends each stream's messages to the broker driver configured for it.
//
// Invariant: publishing is batch-shaped and answers per message. A driver's Publish
// returns exactly one error per message, in order, nil meaning the broker confirmed
// that message (Kafka acks=all, a JetStream PubAck; for core NATS, flushed to the
// server). A non-nil error is classified so the dispatcher knows what it cost: a
// permanent error will never succeed, a retryable one may succeed later and spends an
// attempt, and an unreachable broker never saw the message and costs no attempt.
// The router never touches the database.
package router

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
)

// Headers every driver adds to every message, so consumers can de-duplicate and tell
// streams apart whatever the broker.
const (
	// HeaderID carries the row id: unique within one outbox table only.
	HeaderID     = "Outbox-Id"
	HeaderStream = "Outbox-Stream"
	// HeaderMessageID carries Message.DedupID(), the id to de-duplicate on: unique
	// across tables, databases and restores that reuse row ids.
	HeaderMessageID = "Outbox-Message-Id"
	// HeaderKey carries the row's key on brokers that have no key of their own (NATS).
	HeaderKey = "Outbox-Key"
)

// Message is one outbox message on its way to a broker.
type Message struct {
	ID        int64             // outbox row id, sent as the Outbox-Id header
	Stream    string            // the outbox stream, sent as the Outbox-Stream header
	Topic     string            // the destination: Kafka topic or NATS subject, prefix applied
	Key       []byte            // Kafka partition key; nil for none
	Headers   map[string]string // the producer's headers, passed through
	Payload   []byte
	MessageID string // caller-supplied de-duplication id; "" uses DedupID's default
	// RowDedupID is the row's random de-duplication id (column dedup_id), the same on
	// every publish of the row.
	RowDedupID string
	// Attempts spent before this publish and the row's creation time (database clock),
	// for tracing; drivers do not send them.
	Attempts  int
	CreatedAt time.Time
}

// DedupID is the id brokers and consumers de-duplicate on (the Outbox-Message-Id
// header, JetStream's Nats-Msg-Id): the producer's message id when it gave one,
// otherwise the row's random dedup id. The row id is the last resort, for a message not
// built from a row (tests, benchmarks): it repeats across tables and databases, so two
// outboxes publishing into one JetStream stream would have one's messages dropped as
// duplicates of the other's.
func (m *Message) DedupID() string {
	switch {
	case m.MessageID != "":
		return m.MessageID
	case m.RowDedupID != "":
		return m.RowDedupID
	}
	return strconv.FormatInt(m.ID, 10)
}

// Driver publishes batches to one broker connection.
type Driver interface {
	// Publish sends msgs and returns one error per message, in order. It returns when
	// every message is confirmed or has failed, or when ctx ends: then every message
	// not yet confirmed gets an error wrapping ctx.Err().
	Publish(ctx context.Context, msgs []Message) []error
	// Close releases the connection; Publish after Close fails every message.
	Close() error
}

// Route binds a stream to a driver and a topic prefix.
type Route struct {
	Stream      string
	DriverName  string
	Driver      Driver
	TopicPrefix string
}

// Router maps streams to their routes.
type Router struct {
	routes  map[string]Route
	drivers map[string]Driver
}

// New builds a router. Every route needs a driver; a stream may appear once.
func New(routes ...Route) (*Router, error) {
	r := &Router{routes: make(map[string]Route, len(routes)), drivers: map[string]Driver{}}
	for _, rt := range routes {
		if rt.Driver == nil {
			return nil, fmt.Errorf("router: stream %q: no driver", rt.Stream)
		}
		if _, dup := r.routes[rt.Stream]; dup {
			return nil, fmt.Errorf("router: stream %q routed twice", rt.Stream)
		}
		r.routes[rt.Stream] = rt
		r.drivers[rt.DriverName] = rt.Driver
	}
	return r, nil
}

// Streams lists the routed streams, sorted.
func (r *Router) Streams() []string {
	out := make([]string, 0, len(r.routes))
	for s := range r.routes {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Route returns the route of stream.
func (r *Router) Route(stream string) (Route, bool) {
	rt, ok := r.routes[stream]
	return rt, ok
}

// Publisher returns the publisher of one stream.
func (r *Router) Publisher(stream string) (*Publisher, error) {
	rt, ok := r.routes[stream]
	if !ok {
		return nil, fmt.Errorf("router: stream %q has no route", stream)
	}
	return &Publisher{route: rt}, nil
}

// Close closes every driver once.
func (r *Router) Close() error {
	var errs []error
	for name, d := range r.drivers {
		if err := d.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close driver %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Publisher publishes one stream's messages through its route.
type Publisher struct {
	route Route
}

// Route is the publisher's route.
func (p *Publisher) Route() Route { return p.route }

// Topic is the destination of a row's topic on this stream.
func (p *Publisher) Topic(rowTopic string) string { return p.route.TopicPrefix + rowTopic }

// Publish sends msgs, whose Topic must already be the destination (see Topic), and
// returns one error per message. A driver that breaks the one-error-per-message
// contract gets every message a retryable error rather than a panic or a silent ack.
func (p *Publisher) Publish(ctx context.Context, msgs []Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := p.route.Driver.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		bad := Retryable(fmt.Errorf("driver %s returned %d results for %d messages", p.route.DriverName, len(errs), len(msgs)))
		errs = make([]error, len(msgs))
		for i := range errs {
			errs[i] = bad
		}
	}
	return errs
}

type duplicatesKey struct{}

// WithDuplicates returns ctx carrying n, to which a driver adds one for each message of a
// Publish call under ctx that the broker confirmed as a duplicate of a message it
// already held (a JetStream PubAck with "duplicate"), so that the caller can count them
// per stream. It travels in the context because the confirmation is a success (a nil
// error) and wrappers between the caller and the driver (tracing, PublishOrdered's
// chunks) pass the context through unchanged.
func WithDuplicates(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, duplicatesKey{}, n)
}

// NoteDuplicates adds n to the counter WithDuplicates put in ctx, if any. Drivers call
// it before Publish returns, for messages whose result is nil.
func NoteDuplicates(ctx context.Context, n int) {
	if c, ok := ctx.Value(duplicatesKey{}).(*atomic.Int64); ok && n > 0 {
		c.Add(int64(n))
	}
}
