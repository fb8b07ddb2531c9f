// Package router sends each stream's messages to the broker driver configured for it.
//
// Invariant: publishing is batch-shaped and answers per message. A driver's Publish
// returns exactly one error per message, in order, nil meaning the broker confirmed
// that message (Kafka acks=all, a JetStream PubAck; for core NATS, flushed to the
// server). A non-nil error is classified so the dispatcher knows what it cost: a
// permanent error will never succeed, a retryable one may succeed later and spends an
// attempt, and an unreachable broker never saw the message and costs no attempt.
// A message leaves outboxd only through a Publisher: the route's topic prefix applied,
// then the middlewares, then the driver, whose answer is held to that contract. The
// router never touches the database.
//
// Compatibility: what a driver author needs is public API, under the same semantic
// versioning promise as producer and table: Driver, Message and its headers, the error
// classes (Permanent, Retryable, Unreachable, Error and its Kind), Register with
// Registration and Options, and the router/routertest suite. The rest (Router, Publisher,
// routes, middlewares) serves outboxd itself and may change in any release.
package router

import (
	"context"
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
	ID     int64  // outbox row id, sent as the Outbox-Id header
	Stream string // the outbox stream, sent as the Outbox-Stream header
	// Topic is the row's topic as the caller hands it to a Publisher, which prepends the
	// stream's prefix: what middlewares and drivers see is the destination (Kafka
	// topic, NATS subject).
	Topic     string
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

// Route binds a stream to a driver and a topic prefix, and optionally to where its
// dead letters go.
type Route struct {
	Stream      string
	DriverName  string
	Driver      Driver
	TopicPrefix string // prepended to every row's topic of the stream
	// DeadLetter carries the stream's messages that failed for good; a nil Driver
	// means the stream has none.
	DeadLetter DeadLetter
	// CloudEvents, when set, publishes the stream's messages as CloudEvents in binary
	// content mode; Driver must be an EventBinding. Dead letters go out raw.
	CloudEvents *CloudEvents
}

// DeadLetter is the driver a stream's dead letters go out through. Their topic is the
// full destination: no stream prefix is applied to it.
type DeadLetter struct {
	DriverName string
	Driver     Driver
}

// Router maps streams to their publishers.
type Router struct {
	pubs map[string]*Publisher // by stream
	dead map[string]*Publisher // by stream: its dead letters' publisher
}

// Option adjusts a router built by New.
type Option func(*settings)

type settings struct {
	middleware []Middleware
}

// New builds a router. Every route needs a driver; a stream may appear once.
func New(routes []Route, opts ...Option) (*Router, error) {
	var set settings
	for _, o := range opts {
		o(&set)
	}
	r := &Router{pubs: make(map[string]*Publisher, len(routes)), dead: map[string]*Publisher{}}
	for _, rt := range routes {
		if rt.Driver == nil {
			return nil, fmt.Errorf("router: stream %q: no driver", rt.Stream)
		}
		if _, dup := r.pubs[rt.Stream]; dup {
			return nil, fmt.Errorf("router: stream %q routed twice", rt.Stream)
		}
		pub := newPublisher(Destination{Stream: rt.Stream, Driver: rt.DriverName}, rt.TopicPrefix, rt.Driver, set.middleware)
		if rt.CloudEvents != nil {
			b, ok := rt.Driver.(EventBinding)
			if !ok {
				return nil, fmt.Errorf("router: stream %q: format cloudevents: driver %s has no CloudEvents binding", rt.Stream, rt.DriverName)
			}
			pub.events = newEventer(rt.Stream, *rt.CloudEvents, b)
		}
		r.pubs[rt.Stream] = pub
		if dl := rt.DeadLetter; dl.Driver != nil {
			to := Destination{Stream: rt.Stream, Driver: dl.DriverName, DeadLetter: true}
			r.dead[rt.Stream] = newPublisher(to, "", dl.Driver, set.middleware)
		}
	}
	return r, nil
}

// Streams lists the routed streams, sorted.
func (r *Router) Streams() []string {
	out := make([]string, 0, len(r.pubs))
	for s := range r.pubs {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Publisher returns the publisher of one stream.
func (r *Router) Publisher(stream string) (*Publisher, error) {
	p, ok := r.pubs[stream]
	if !ok {
		return nil, fmt.Errorf("router: stream %q has no route", stream)
	}
	return p, nil
}

// DeadLetter returns the publisher of one stream's dead letters.
func (r *Router) DeadLetter(stream string) (*Publisher, error) {
	p, ok := r.dead[stream]
	if !ok {
		return nil, fmt.Errorf("router: stream %q has no dead-letter route", stream)
	}
	return p, nil
}

// Publisher publishes the messages of one destination: a stream's, or its dead
// letters.
type Publisher struct {
	prefix  string
	events  *eventer // nil: messages go out raw
	send    Sender   // the middlewares over the guarded driver
	checker Checker  // the driver's, if it is one (PublishOrdered)
}

func newPublisher(to Destination, prefix string, d Driver, mw []Middleware) *Publisher {
	p := &Publisher{prefix: prefix}
	p.checker, _ = d.(Checker)
	send := guard(to.Driver, d.Publish)
	decorated := false
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			continue
		}
		if wrapped := mw[i](to, send); wrapped != nil {
			send, decorated = wrapped, true
		}
	}
	if decorated { // a middleware is held to the driver's contract too
		send = guard(to.Driver, send)
	}
	p.send = send
	return p
}

// guard answers every message with a retryable error when send breaks the
// one-error-per-message contract, rather than panicking or acknowledging silently.
func guard(driver string, send Sender) Sender {
	return func(ctx context.Context, msgs []Message) []error {
		errs := send(ctx, msgs)
		if len(errs) != len(msgs) {
			bad := Retryable(fmt.Errorf("driver %s returned %d results for %d messages", driver, len(errs), len(msgs)))
			errs = make([]error, len(msgs))
			for i := range errs {
				errs[i] = bad
			}
		}
		return errs
	}
}

// Publish sends msgs, whose Topic is the row's topic (the route's prefix is applied
// here), through the middlewares to the driver and returns one error per message.
// msgs is not modified. A message that cannot be framed as the stream's format asks
// (a CloudEvent without a type) is not sent and gets its permanent error.
func (p *Publisher) Publish(ctx context.Context, msgs []Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	out, bad := p.destined(msgs)
	if bad == nil {
		return p.send(ctx, out)
	}
	sendable := make([]Message, 0, len(out))
	for i := range out {
		if bad[i] == nil {
			sendable = append(sendable, out[i])
		}
	}
	if len(sendable) == 0 {
		return bad
	}
	res := p.send(ctx, sendable)
	j := 0
	for i := range bad {
		if bad[i] == nil {
			bad[i] = res[j]
			j++
		}
	}
	return bad
}

// destined is msgs bound for their destination: a copy with the prefix prepended to
// each topic and, for a CloudEvents stream, the event's headers; or msgs itself when
// there is nothing to change. bad holds the permanent error of each message that
// cannot be framed, and is nil when there is none.
func (p *Publisher) destined(msgs []Message) (out []Message, bad []error) {
	if p.prefix == "" && p.events == nil {
		return msgs, nil
	}
	out = make([]Message, len(msgs))
	for i := range msgs {
		out[i] = msgs[i]
		if i > 0 && msgs[i].Topic == msgs[i-1].Topic {
			out[i].Topic = out[i-1].Topic // one string for a batch's run of one topic
		} else {
			out[i].Topic = p.prefix + msgs[i].Topic
		}
		if p.events == nil {
			continue
		}
		h, err := p.events.event(&msgs[i])
		if err != nil {
			if bad == nil {
				bad = make([]error, len(msgs))
			}
			bad[i] = err
			continue
		}
		out[i].Headers = h
	}
	return out, bad
}

type duplicatesKey struct{}

// WithDuplicates returns ctx carrying n, to which a driver adds one for each message of a
// Publish call under ctx that the broker confirmed as a duplicate of a message it
// already held (a JetStream PubAck with "duplicate"), so that the caller can count them
// per stream. It travels in the context because the confirmation is a success (a nil
// error) and what lies between the caller and the driver (middlewares, PublishOrdered's
// chunks) passes the context through unchanged.
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
