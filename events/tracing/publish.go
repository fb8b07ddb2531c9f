package tracing

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxd/outboxd/router"
)

// Attributes outboxd adds to the messaging semantic conventions.
const (
	AttrStream = attribute.Key("outboxd.stream")
	// AttrOutbox names the outbox (outboxes[<n>].name) the message came from; only set
	// when the replica serves an outboxes list.
	AttrOutbox   = attribute.Key("outboxd.outbox")
	AttrAttempts = attribute.Key("outboxd.attempts") // attempts spent before this publish
	// AttrWaitMS is the time from the row's created_at (database clock) to the start of
	// this publish (this host's clock), in milliseconds; never negative.
	AttrWaitMS = attribute.Key("outboxd.wait_ms")
)

// ScopeName names the instrumentation scope of outboxd's spans. It keeps the package's
// first import path: queries and dashboards that select outboxd's spans by scope must
// not break because the package moved.
const ScopeName = "github.com/outboxd/outboxd/tracing"

var errNoResult = errors.New("publisher returned no result for this message")

// Middleware traces every message a router publishes (router.WithMiddleware), each
// stream's messages and its dead letters: see Wrap. systems maps a driver's name to the
// messaging.system of its spans (its type: kafka, nats, jetstream or redis).
func Middleware(tp trace.TracerProvider, systems map[string]string) router.Middleware {
	return OutboxMiddleware(tp, systems, "")
}

// OutboxMiddleware is Middleware for the router of one outbox of several: its spans
// also carry AttrOutbox (none when outbox is "").
func OutboxMiddleware(tp trace.TracerProvider, systems map[string]string, outbox string) router.Middleware {
	return func(to router.Destination, next router.Sender) router.Sender {
		var extra []attribute.KeyValue
		if outbox != "" {
			extra = append(extra, AttrOutbox.String(outbox))
		}
		return wrap(next, tp, systems[to.Driver], extra)
	}
}

// Wrap returns a Sender that publishes through next and traces every message: one
// producer span named "publish <destination>", parented to the trace context the
// producer left in the message's traceparent header (a new root when there is none),
// ended with that message's outcome. The span's context replaces traceparent and
// tracestate in a copy of the headers that next publishes, so consumers continue the
// trace from the publish. system is the messaging.system value: the driver's type.
//
// When tp is nil or a no-op provider (what Setup returns with tracing off), Wrap
// returns next itself: tracing off costs nothing. Under a router, Wrap sees each driver
// call of an ordered publish, whose key order is the router's to keep.
func Wrap(next router.Sender, tp trace.TracerProvider, system string) router.Sender {
	return wrap(next, tp, system, nil)
}

// wrap is Wrap with extra attributes on every span.
func wrap(next router.Sender, tp trace.TracerProvider, system string, extra []attribute.KeyValue) router.Sender {
	if tp == nil {
		return next
	}
	if _, off := tp.(noop.TracerProvider); off {
		return next
	}
	p := &publisher{
		next:   next,
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		system: semconv.MessagingSystemKey.String(system),
		extra:  extra,
	}
	return p.publish
}

type publisher struct {
	next   router.Sender
	tracer trace.Tracer
	system attribute.KeyValue
	extra  []attribute.KeyValue
	prop   propagation.TraceContext
}

var (
	startOptions  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	operationName = semconv.MessagingOperationName("publish")
)

// publish starts every message's span, publishes the batch with the new contexts in
// copies of the headers, and ends each span with its message's result.
func (p *publisher) publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return p.next(ctx, msgs)
	}
	// A message's only parent is its own traceparent: the batch's context carries none.
	base := trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	out := make([]router.Message, len(msgs))
	spans := make([]trace.Span, len(msgs))
	// attrs is refilled for each message: the SDK copies what it is given.
	attrs := make([]attribute.KeyValue, 0, 10)
	var topic, name string // a batch mostly goes to one destination: build its span name once
	start := time.Now()
	for i := range msgs {
		m := &msgs[i]
		parent := base
		if _, ok := headers(m.Headers).lookup(traceparent); ok {
			parent = p.prop.Extract(base, headers(m.Headers))
		}
		if name == "" || m.Topic != topic {
			topic, name = m.Topic, "publish "+m.Topic
		}
		sctx, span := p.tracer.Start(parent, name, startOptions...)
		if span.IsRecording() {
			attrs = append(attrs[:0],
				p.system,
				semconv.MessagingOperationTypeSend,
				operationName,
				semconv.MessagingDestinationName(m.Topic),
				semconv.MessagingMessageID(strconv.FormatInt(m.ID, 10)),
				semconv.MessagingMessageBodySize(len(m.Payload)),
				AttrStream.String(m.Stream),
				AttrAttempts.Int(m.Attempts),
			)
			attrs = append(attrs, p.extra...)
			if !m.CreatedAt.IsZero() {
				attrs = append(attrs, AttrWaitMS.Int64(max(start.Sub(m.CreatedAt).Milliseconds(), 0)))
			}
			span.SetAttributes(attrs...)
		}
		spans[i] = span
		out[i] = *m
		out[i].Headers = withContext(sctx, p.prop, m.Headers)
	}

	errs := p.next(ctx, out)

	for i, span := range spans {
		err := errNoResult
		if i < len(errs) {
			err = errs[i]
		}
		if err != nil && span.IsRecording() {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(semconv.ErrorTypeKey.String(router.KindOf(err).String()))
		}
		span.End()
	}
	return errs
}

// withContext returns a copy of h whose traceparent and tracestate (in any letter case)
// are those of ctx's span.
func withContext(ctx context.Context, prop propagation.TraceContext, h map[string]string) map[string]string {
	c := make(headers, len(h)+2)
	for k, v := range h {
		if !isTraceHeader(k) {
			c[k] = v
		}
	}
	prop.Inject(ctx, c)
	return c
}

// The W3C Trace Context header names (lower case, as the propagator writes them).
const (
	traceparent = "traceparent"
	tracestate  = "tracestate"
)

func isTraceHeader(k string) bool {
	return strings.EqualFold(k, traceparent) || strings.EqualFold(k, tracestate)
}

// headers carries trace context in a message's headers. Broker headers are matched
// without regard to case, as HTTP's are: a producer that wrote Traceparent is understood.
type headers map[string]string

func (h headers) lookup(key string) (string, bool) {
	if v, ok := h[key]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

// Get implements propagation.TextMapCarrier.
func (h headers) Get(key string) string {
	v, _ := h.lookup(key)
	return v
}

// Set implements propagation.TextMapCarrier.
func (h headers) Set(key, value string) { h[key] = value }

// Keys implements propagation.TextMapCarrier.
func (h headers) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
