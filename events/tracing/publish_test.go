package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/router"
)

// A producer's trace context: trace 0af7…0e47, span b7ad…, sampled.
const (
	producerTraceID = "0af7651916cd43dd8448eb211c80319c"
	producerSpanID  = "b7ad6b7169203331"
	producerParent  = "00-" + producerTraceID + "-" + producerSpanID + "-01"
)

// recorder is the next publisher: it records what it was asked to publish and answers
// with outcome.
type recorder struct {
	mu      sync.Mutex
	batches [][]router.Message
	outcome func(router.Message) error
}

func (r *recorder) Publish(_ context.Context, msgs []router.Message) []error {
	r.mu.Lock()
	r.batches = append(r.batches, msgs)
	r.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if r.outcome != nil {
			errs[i] = r.outcome(m)
		}
	}
	return errs
}

func (r *recorder) published(t *testing.T) []router.Message {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.batches) != 1 {
		t.Fatalf("next publisher got %d batches, want 1", len(r.batches))
	}
	return r.batches[0]
}

// setup returns a publisher tracing into an in-memory exporter through next, with
// Setup's sampler at ratio.
func setup(t *testing.T, next *recorder, ratio float64) (router.Sender, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(sdktrace.WithSyncer(exp), "outboxd-test", "v0.0.0-test", ratio)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.Wrap(next.Publish, tp, "kafka"), exp
}

func message(id int64, headers map[string]string) router.Message {
	return router.Message{
		ID: id, Stream: "orders", Topic: "shop.orders.paid", Key: []byte("42"),
		Headers: headers, Payload: []byte(`{"order":42}`),
		Attempts: 2, CreatedAt: time.Now().Add(-1500 * time.Millisecond),
	}
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, id int64) tracetest.SpanStub {
	t.Helper()
	for _, s := range exp.GetSpans() {
		if attrOf(s, "messaging.message.id") == attribute.StringValue(fmt.Sprint(id)) {
			return s
		}
	}
	t.Fatalf("no span for message %d among %d spans", id, len(exp.GetSpans()))
	return tracetest.SpanStub{}
}

func attrOf(s tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// parseParent splits a traceparent header into its trace id, span id and flags.
func parseParent(t *testing.T, h string) (traceID, spanID, flags string) {
	t.Helper()
	parts := strings.Split(h, "-")
	if len(parts) != 4 || parts[0] != "00" {
		t.Fatalf("traceparent %q is not version-00 W3C trace context", h)
	}
	return parts[1], parts[2], parts[3]
}

func TestAMessageWithATraceparentIsPublishedInTheProducersTrace(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	pub, exp := setup(t, next, 1)
	row := map[string]string{"traceparent": producerParent, "tracestate": "shop=1", "content-type": "application/json"}
	before := maps.Clone(row)

	if errs := pub(context.Background(), []router.Message{message(7, row)}); errs[0] != nil {
		t.Fatalf("publish: %v", errs[0])
	}

	s := spanNamed(t, exp, 7)
	if got := s.SpanContext.TraceID().String(); got != producerTraceID {
		t.Errorf("span trace id = %s, want the producer's %s", got, producerTraceID)
	}
	if got := s.Parent.SpanID().String(); got != producerSpanID || !s.Parent.IsRemote() {
		t.Errorf("span parent = %s (remote %v), want the producer's span %s, remote", got, s.Parent.IsRemote(), producerSpanID)
	}
	if s.Name != "publish shop.orders.paid" || s.SpanKind != trace.SpanKindProducer {
		t.Errorf("span %q of kind %v, want %q of kind producer", s.Name, s.SpanKind, "publish shop.orders.paid")
	}
	if s.Status.Code != codes.Unset {
		t.Errorf("confirmed message's span status = %v %q, want unset", s.Status.Code, s.Status.Description)
	}

	sent := next.published(t)[0].Headers
	traceID, spanID, flags := parseParent(t, sent["traceparent"])
	if traceID != producerTraceID || spanID != s.SpanContext.SpanID().String() || flags != "01" {
		t.Errorf("published traceparent %q, want trace %s, the publish span %s, sampled", sent["traceparent"], producerTraceID, s.SpanContext.SpanID())
	}
	if sent["tracestate"] != "shop=1" || sent["content-type"] != "application/json" || len(sent) != 3 {
		t.Errorf("published headers %v, want the producer's with the new traceparent", sent)
	}
	if !maps.Equal(row, before) {
		t.Errorf("the row's headers changed to %v, want them untouched: %v", row, before)
	}
}

func TestAMessageWithoutATraceparentStartsANewTrace(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	pub, exp := setup(t, next, 1)
	// Even with a span in the batch's context: a message's only parent is its own header.
	ctx, batchSpan := sdktrace.NewTracerProvider().Tracer("x").Start(context.Background(), "batch")
	defer batchSpan.End()

	pub(ctx, []router.Message{message(8, map[string]string{"tracestate": "stale=1"}), message(9, nil)})

	sent := next.published(t)
	for i, id := range []int64{8, 9} {
		s := spanNamed(t, exp, id)
		if s.Parent.IsValid() {
			t.Errorf("message %d: span has parent %s, want a root", id, s.Parent.SpanID())
		}
		traceID, spanID, _ := parseParent(t, sent[i].Headers["traceparent"])
		if traceID != s.SpanContext.TraceID().String() || spanID != s.SpanContext.SpanID().String() {
			t.Errorf("message %d: published traceparent %q, want the span's %s-%s", id, sent[i].Headers["traceparent"], s.SpanContext.TraceID(), s.SpanContext.SpanID())
		}
		if _, ok := sent[i].Headers["tracestate"]; ok {
			t.Errorf("message %d: a tracestate without its traceparent was passed on: %v", id, sent[i].Headers)
		}
	}
	if a, b := spanNamed(t, exp, 8).SpanContext.TraceID(), spanNamed(t, exp, 9).SpanContext.TraceID(); a == b {
		t.Errorf("two root messages share trace %s, want one trace each", a)
	}
}

func TestASpanCarriesTheMessagingAttributesAttemptsAndWait(t *testing.T) {
	t.Parallel()
	pub, exp := setup(t, &recorder{}, 1)
	pub(context.Background(), []router.Message{message(10, nil)})

	s := spanNamed(t, exp, 10)
	want := map[attribute.Key]attribute.Value{
		"messaging.system":            attribute.StringValue("kafka"),
		"messaging.operation.type":    attribute.StringValue("send"),
		"messaging.destination.name":  attribute.StringValue("shop.orders.paid"),
		"messaging.message.id":        attribute.StringValue("10"),
		"messaging.message.body.size": attribute.IntValue(len(`{"order":42}`)),
		tracing.AttrStream:            attribute.StringValue("orders"),
		tracing.AttrAttempts:          attribute.IntValue(2),
	}
	for k, v := range want {
		if got := attrOf(s, k); got != v {
			t.Errorf("%s = %v, want %v", k, got.String(), v.String())
		}
	}
	if wait := attrOf(s, tracing.AttrWaitMS).AsInt64(); wait < 1500 || wait > 60_000 {
		t.Errorf("outboxd.wait_ms = %d, want the 1.5 s since the row's creation", wait)
	}
	if got := s.Resource.Set(); !got.HasValue("service.name") || !got.HasValue("service.version") {
		t.Errorf("resource %v lacks service.name or service.version", s.Resource.Attributes())
	}
}

func TestEachSpanEndsWithItsOwnMessagesOutcome(t *testing.T) {
	t.Parallel()
	tooLarge := router.Permanent(errors.New("message too large"))
	next := &recorder{outcome: func(m router.Message) error {
		switch m.ID {
		case 2:
			return tooLarge
		case 3:
			return errors.New("not enough replicas") // unclassified: retryable
		}
		return nil
	}}
	pub, exp := setup(t, next, 1)

	errs := pub(context.Background(), []router.Message{message(1, nil), message(2, nil), message(3, nil)})
	if errs[0] != nil || !errors.Is(errs[1], tooLarge) || errs[2] == nil {
		t.Fatalf("publish results %v, want the next publisher's own", errs)
	}

	cases := []struct {
		id     int64
		status codes.Code
		text   string
		kind   string
	}{
		{1, codes.Unset, "", ""},
		{2, codes.Error, tooLarge.Error(), "permanent"},
		{3, codes.Error, "not enough replicas", "retryable"},
	}
	for _, c := range cases {
		s := spanNamed(t, exp, c.id)
		if s.Status.Code != c.status || s.Status.Description != c.text {
			t.Errorf("message %d: status %v %q, want %v %q", c.id, s.Status.Code, s.Status.Description, c.status, c.text)
		}
		if got := attrOf(s, "error.type").AsString(); got != c.kind {
			t.Errorf("message %d: error.type %q, want %q", c.id, got, c.kind)
		}
	}
}

func TestAProducersHeaderNameIsMatchedWithoutRegardToCase(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	pub, exp := setup(t, next, 1)
	pub(context.Background(), []router.Message{message(11, map[string]string{"Traceparent": producerParent})})

	s := spanNamed(t, exp, 11)
	if s.Parent.SpanID().String() != producerSpanID {
		t.Errorf("span parent %s, want the producer's %s", s.Parent.SpanID(), producerSpanID)
	}
	sent := next.published(t)[0].Headers
	if _, stale := sent["Traceparent"]; stale || len(sent) != 1 {
		t.Errorf("published headers %v, want only the new traceparent", sent)
	}
}

func TestAnUnsampledProducerTraceIsFollowedAndStillPropagated(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	pub, exp := setup(t, next, 1) // the ratio applies to roots only
	unsampled := "00-" + producerTraceID + "-" + producerSpanID + "-00"
	pub(context.Background(), []router.Message{message(12, map[string]string{"traceparent": unsampled})})

	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans recorded for a trace the producer did not sample, want 0", n)
	}
	traceID, spanID, flags := parseParent(t, next.published(t)[0].Headers["traceparent"])
	if traceID != producerTraceID || spanID == producerSpanID || flags != "00" {
		t.Errorf("published traceparent %s-%s-%s, want the producer's trace, a new span, unsampled", traceID, spanID, flags)
	}
}

func TestASampleRatioOfZeroRecordsNoRoot(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	pub, exp := setup(t, next, 0)
	pub(context.Background(), []router.Message{message(13, nil), message(14, map[string]string{"traceparent": producerParent})})

	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].SpanContext.TraceID().String() != producerTraceID {
		t.Errorf("recorded %d spans, want only the one whose producer sampled it", len(spans))
	}
}

func TestTracingOffWrapsNothing(t *testing.T) {
	t.Parallel()
	tp, shutdown, err := tracing.Setup(context.Background(), config.Tracing{Enabled: false, SampleRatio: 1, ServiceName: "outboxd"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []router.Message{message(1, map[string]string{"traceparent": producerParent})}
	for _, tp := range []trace.TracerProvider{tp, nil} {
		next := &recorder{}
		tracing.Wrap(next.Publish, tp, "nats")(context.Background(), msgs)
		if got := next.published(t); &got[0] != &msgs[0] {
			t.Errorf("Wrap with tracing off (provider %T) handed on a copy of the batch, want the batch itself", tp)
		}
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown with tracing off: %v", err)
	}
}

func TestTracingOffAllocatesNothingPerMessage(t *testing.T) {
	tp, _, err := tracing.Setup(context.Background(), config.Tracing{}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	msgs := batch(100)
	pub := tracing.Wrap(newDiscard(len(msgs)).Publish, tp, "kafka")
	if allocs := testing.AllocsPerRun(100, func() { pub(context.Background(), msgs) }); allocs != 0 {
		t.Errorf("publishing a batch with tracing off allocates %v times, want 0", allocs)
	}
}

func TestConcurrentBatchesAreTracedIndependently(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	pub, exp := setup(t, next, 1)
	shared := map[string]string{"traceparent": producerParent}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			msgs := make([]router.Message, 25)
			for i := range msgs {
				msgs[i] = message(int64(w*100+i), shared) // every row shares one headers map
			}
			pub(context.Background(), msgs)
		})
	}
	wg.Wait()
	if n := len(exp.GetSpans()); n != 100 {
		t.Errorf("%d spans, want 100", n)
	}
	if len(shared) != 1 || shared["traceparent"] != producerParent {
		t.Errorf("shared headers changed to %v", shared)
	}
}

// keyDriver is a router driver that records each call's messages and whether it came
// from an ordered publish.
type keyDriver struct {
	recorder
	ordered []bool
}

func (d *keyDriver) Publish(ctx context.Context, msgs []router.Message) []error {
	d.ordered = append(d.ordered, router.KeyOrdered(ctx))
	return d.recorder.Publish(ctx, msgs)
}

func (*keyDriver) Close() error { return nil }

// As a router middleware, tracing sees an ordered stream's driver calls under the
// router's ordered publish, which stays ordered, and names each span after the
// destination, the stream's prefix applied, with its driver's messaging system.
func TestTheTracingMiddlewareTracesAnOrderedPublishUnderTheRouter(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(sdktrace.WithSyncer(exp), "outboxd-test", "v0.0.0-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	d := &keyDriver{}
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "events", Driver: d, TopicPrefix: "shop."}},
		router.WithMiddleware(tracing.Middleware(tp, map[string]string{"events": "jetstream"})))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := r.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []router.Message{{ID: 1, Topic: "t", Key: []byte("k")}, {ID: 2, Topic: "t", Key: []byte("k")}}
	if errs := pub.PublishOrdered(context.Background(), msgs); errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v", errs)
	}
	if len(d.ordered) != 1 || !d.ordered[0] {
		t.Fatalf("driver calls ordered %v, want one ordered call", d.ordered)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.Name != "publish shop.t" || attrOf(s, "messaging.system").AsString() != "jetstream" {
			t.Fatalf("span %q, system %v", s.Name, attrOf(s, "messaging.system"))
		}
	}
}

func TestTheSpansOfOneOfSeveralOutboxesNameIt(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(sdktrace.WithSyncer(exp), "outboxd-test", "v0.0.0-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	to := router.Destination{Driver: "bus"}
	for id, outbox := range map[int64]string{1: "billing", 2: ""} {
		pub := tracing.OutboxMiddleware(tp, map[string]string{"bus": "kafka"}, outbox)(to, (&recorder{}).Publish)
		pub(context.Background(), []router.Message{message(id, nil)})
	}
	if got := attrOf(spanNamed(t, exp, 1), tracing.AttrOutbox); got != attribute.StringValue("billing") {
		t.Errorf("outboxd.outbox = %v, want billing", got.String())
	}
	if got := attrOf(spanNamed(t, exp, 2), tracing.AttrOutbox); got != (attribute.Value{}) {
		t.Errorf("a replica without an outboxes list sets outboxd.outbox = %v, want none", got.String())
	}
}
