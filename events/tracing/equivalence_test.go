package tracing_test

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/outboxd/outboxd/events/tracing"
)

// recordedSpans makes finished spans that use every field the exporter converts: two
// resources, two scopes (one with version, schema and attributes), every span kind and
// status code, a remote parent with a trace state, a local parent, links local and
// remote, events, every attribute type, and attributes, events and links over the
// limits (the SDK keeps the newest) so that each dropped count is non-zero somewhere.
func recordedSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	limits := sdktrace.NewSpanLimits()
	limits.AttributeCountLimit = 14
	limits.EventCountLimit = 2
	limits.LinkCountLimit = 2
	limits.AttributePerEventCountLimit = 1
	limits.AttributePerLinkCountLimit = 1
	provider := func(service string) *sdktrace.TracerProvider {
		res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
			attribute.String("service.name", service), attribute.Int("replica", 2))
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(rec),
			sdktrace.WithRawSpanLimits(limits))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	a, b := provider("a"), provider("b")
	one := a.Tracer("outboxd/one", trace.WithInstrumentationVersion("1.2.3"),
		trace.WithSchemaURL("https://opentelemetry.io/schemas/1.24.0"),
		trace.WithInstrumentationAttributes(attribute.String("scope.attr", "x"), attribute.Bool("scope.flag", true)))
	two := a.Tracer("outboxd/two")
	other := b.Tracer("outboxd/one", trace.WithInstrumentationVersion("1.2.3"))

	ts, err := trace.ParseTraceState("vendor=opaque,other=1")
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
		SpanID:  trace.SpanID{0xb7, 0xad, 1, 2, 3, 4, 5, 6}, TraceFlags: trace.FlagsSampled,
		TraceState: ts, Remote: true,
	})
	linked := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
		SpanID:  trace.SpanID{2, 2, 2, 2, 2, 2, 2, 2}, TraceState: ts, Remote: true,
	})
	start := time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.UTC)

	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	ctx, parent := one.Start(ctx, "publish shop.orders", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(start),
		trace.WithLinks(
			trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled})},
			trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{5}, SpanID: trace.SpanID{6}})},
			trace.Link{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.String("why", "batch"), attribute.Int("n", 1)}},
		))
	parent.SetAttributes(
		attribute.Bool("bool", true), attribute.Int64("int64", -42), attribute.Float64("float64", 2.5),
		attribute.String("string", "s"), attribute.BoolSlice("bools", []bool{true, false}),
		attribute.Int64Slice("int64s", []int64{1, -2}), attribute.Float64Slice("float64s", []float64{0.5, -1}),
		attribute.StringSlice("strings", []string{"a", ""}), attribute.ByteSlice("bytes", []byte{0, 1, 2}),
		attribute.Slice("slice", attribute.StringValue("x"), attribute.IntValue(1)),
		attribute.Map("map", attribute.String("k", "v"), attribute.Bool("ok", true)),
		attribute.KeyValue{Key: "empty"},
		attribute.Int("one.more", 1), attribute.Int("limit", 2), attribute.Int("over.limit", 3),
	)
	parent.AddEvent("over the limit, so dropped")
	parent.AddEvent("claimed", trace.WithTimestamp(start.Add(time.Millisecond)),
		trace.WithAttributes(attribute.Int("rows", 3), attribute.String("dropped", "yes")))
	parent.AddEvent("sent", trace.WithTimestamp(start.Add(2*time.Millisecond)))
	parent.SetStatus(codes.Error, "broker refused")

	_, child := one.Start(ctx, "ack", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start))
	child.SetStatus(codes.Ok, "the SDK drops this description")
	child.End(trace.WithTimestamp(start.Add(time.Second)))
	parent.End(trace.WithTimestamp(start.Add(2 * time.Second)))

	for _, k := range []trace.SpanKind{trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindInternal} {
		_, s := two.Start(context.Background(), "kind "+k.String(), trace.WithSpanKind(k))
		s.End()
	}
	_, s := other.Start(context.Background(), "other resource")
	s.SetStatus(codes.Unset, "")
	s.End()

	spans := rec.Ended()
	if len(spans) != 6 {
		t.Fatalf("recorded %d spans, want 6", len(spans))
	}
	return spans
}

// received starts a collector that keeps the one request body it is sent.
func received(t *testing.T) (*httptest.Server, <-chan []byte) {
	t.Helper()
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("collector: %v", err)
		}
		got <- body
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func decode(t *testing.T, body []byte) *coltrace.ExportTraceServiceRequest {
	t.Helper()
	req := &coltrace.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		t.Fatalf("decode: %v", err)
	}
	// otlptracehttp orders resources as a map iterates; scopes and spans keep their order.
	slices.SortFunc(req.ResourceSpans, func(x, y *tracepb.ResourceSpans) int {
		return cmp.Compare(serviceName(x), serviceName(y))
	})
	return req
}

func serviceName(rs *tracepb.ResourceSpans) string {
	for _, kv := range rs.GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func TestExporterSendsWhatOTLPTraceHTTPSends(t *testing.T) {
	t.Parallel()
	spans := recordedSpans(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	oursSrv, oursBody := received(t)
	ours, err := tracing.NewExporter(oursSrv.URL, nil, time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := ours.ExportSpans(ctx, spans); err != nil {
		t.Fatalf("our export: %v", err)
	}
	theirsSrv, theirsBody := received(t)
	theirs, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(strings.TrimPrefix(theirsSrv.URL, "http://")), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	if err := theirs.ExportSpans(ctx, spans); err != nil {
		t.Fatalf("otlptracehttp export: %v", err)
	}
	_ = theirs.Shutdown(ctx)

	got, want := decode(t, <-oursBody), decode(t, <-theirsBody)
	// The one known difference: otlptracehttp v1.47 leaves out a link's trace state,
	// which OTLP has a field for; we send it.
	var linkStates []string
	for _, rs := range got.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				for _, l := range sp.GetLinks() {
					linkStates = append(linkStates, l.GetTraceState())
					l.TraceState = ""
				}
			}
		}
	}
	if wantStates := []string{"", "vendor=opaque,other=1"}; !slices.Equal(linkStates, wantStates) {
		t.Errorf("link trace states %q, want %q", linkStates, wantStates)
	}
	if !proto.Equal(got, want) {
		t.Errorf("our request differs from otlptracehttp's: %s", firstDifference(got, want))
	}
	if n := len(want.GetResourceSpans()); n != 2 {
		t.Errorf("%d resources, want 2: the test no longer covers grouping", n)
	}
}

// firstDifference names the first span (or resource or scope) that differs and prints
// both versions of it.
func firstDifference(got, want *coltrace.ExportTraceServiceRequest) string {
	show := func(what string, x, y proto.Message) string {
		return what + ":\nours:\n" + prototext.Format(x) + "\ntheirs:\n" + prototext.Format(y)
	}
	if len(got.ResourceSpans) != len(want.ResourceSpans) {
		return show("resource spans", got, want)
	}
	for i, rs := range got.ResourceSpans {
		wrs := want.ResourceSpans[i]
		if !proto.Equal(rs.Resource, wrs.Resource) || rs.SchemaUrl != wrs.SchemaUrl || len(rs.ScopeSpans) != len(wrs.ScopeSpans) {
			return show("resource", rs, wrs)
		}
		for j, ss := range rs.ScopeSpans {
			wss := wrs.ScopeSpans[j]
			if !proto.Equal(ss.Scope, wss.Scope) || ss.SchemaUrl != wss.SchemaUrl || len(ss.Spans) != len(wss.Spans) {
				return show("scope", ss, wss)
			}
			for k, sp := range ss.Spans {
				if !proto.Equal(sp, wss.Spans[k]) {
					return show("span "+sp.Name, sp, wss.Spans[k])
				}
			}
		}
	}
	return show("request", got, want)
}
