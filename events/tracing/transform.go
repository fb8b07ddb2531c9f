package tracing

import (
	"math"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// This file turns the SDK's finished spans into the OTLP trace protobuf. Only the message
// packages of go.opentelemetry.io/proto/otlp are used: its collector package (the request
// type) comes with gRPC service stubs, and linking gRPC is what this exporter avoids.

// requestField is ExportTraceServiceRequest's field 1, `repeated ResourceSpans resource_spans`.
const requestField protowire.Number = 1

// marshalRequest encodes spans as an ExportTraceServiceRequest. Writing each ResourceSpans
// as field 1 by hand gives the bytes proto.Marshal gives for the request message itself.
func marshalRequest(spans []sdktrace.ReadOnlySpan) ([]byte, int, error) {
	groups := resourceSpans(spans)
	if len(groups) == 0 {
		return nil, 0, nil
	}
	var b []byte
	n := 0
	opts := proto.MarshalOptions{UseCachedSize: true}
	for _, rs := range groups {
		size := proto.Size(rs) // caches the sizes MarshalAppend then reuses
		b = protowire.AppendTag(b, requestField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		var err error
		if b, err = opts.MarshalAppend(b, rs); err != nil {
			return nil, 0, err
		}
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return b, n, nil
}

// resourceKey tells resources apart: by attributes, and by schema URL so that one
// resource's schema is never sent as another's.
type resourceKey struct {
	attrs  attribute.Distinct
	schema string
}

type scopeKey struct {
	res   resourceKey
	scope instrumentation.Scope
}

// resourceSpans groups spans by resource, then by instrumentation scope, each group in the
// order its first span came.
func resourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	var out []*tracepb.ResourceSpans
	byRes := map[resourceKey]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res := s.Resource()
		rk := resourceKey{attrs: res.Equivalent(), schema: res.SchemaURL()}
		rs, ok := byRes[rk]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: resourceProto(res), SchemaUrl: res.SchemaURL()}
			byRes[rk] = rs
			out = append(out, rs)
		}
		sc := s.InstrumentationScope()
		sk := scopeKey{res: rk, scope: sc}
		ss, ok := byScope[sk]
		if !ok {
			ss = &tracepb.ScopeSpans{Scope: scopeProto(sc), SchemaUrl: sc.SchemaURL}
			byScope[sk] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	return out
}

func resourceProto(res *resource.Resource) *resourcepb.Resource {
	if res == nil {
		return nil
	}
	return &resourcepb.Resource{Attributes: iterProto(res.Iter())}
}

// scopeProto leaves the scope out when the tracer was given no name, version or schema.
func scopeProto(sc instrumentation.Scope) *commonpb.InstrumentationScope {
	if sc == (instrumentation.Scope{}) {
		return nil
	}
	return &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version, Attributes: iterProto(sc.Attributes.Iter())}
}

func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  flags(sc.TraceFlags(), s.Parent().IsRemote()),
		Name:                   s.Name(),
		Kind:                   kindProto(s.SpanKind()),
		StartTimeUnixNano:      unixNano(s.StartTime()),
		EndTimeUnixNano:        unixNano(s.EndTime()),
		Attributes:             attrsProto(s.Attributes()),
		DroppedAttributesCount: count(s.DroppedAttributes()),
		Events:                 eventsProto(s.Events()),
		DroppedEventsCount:     count(s.DroppedEvents()),
		Links:                  linksProto(s.Links()),
		DroppedLinksCount:      count(s.DroppedLinks()),
		Status:                 statusProto(s.Status()),
	}
	if psid := s.Parent().SpanID(); psid.IsValid() {
		p.ParentSpanId = psid[:]
	}
	return p
}

// flags is the W3C trace flags in the low byte plus OTLP's remote bits: the SDK always
// knows whether the parent (or linked) context is remote, so "has is-remote" is always set.
func flags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if remote {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func kindProto(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

// statusProto always returns a status, an empty one for Unset; the SDK keeps a description
// only for Error, and so does OTLP.
func statusProto(st sdktrace.Status) *tracepb.Status {
	switch st.Code {
	case codes.Ok:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	case codes.Error:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	}
	return &tracepb.Status{}
}

func eventsProto(events []sdktrace.Event) []*tracepb.Span_Event {
	if len(events) == 0 {
		return nil
	}
	out := make([]*tracepb.Span_Event, len(events))
	for i, e := range events {
		out[i] = &tracepb.Span_Event{
			Name:                   e.Name,
			TimeUnixNano:           unixNano(e.Time),
			Attributes:             attrsProto(e.Attributes),
			DroppedAttributesCount: count(e.DroppedAttributeCount),
		}
	}
	return out
}

func linksProto(links []sdktrace.Link) []*tracepb.Span_Link {
	if len(links) == 0 {
		return nil
	}
	out := make([]*tracepb.Span_Link, len(links))
	for i, l := range links {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		out[i] = &tracepb.Span_Link{
			TraceId:                tid[:],
			SpanId:                 sid[:],
			TraceState:             l.SpanContext.TraceState().String(),
			Attributes:             attrsProto(l.Attributes),
			DroppedAttributesCount: count(l.DroppedAttributeCount),
			Flags:                  flags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()),
		}
	}
	return out
}

func attrsProto(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: valueProto(kv.Value)}
	}
	return out
}

func iterProto(it attribute.Iterator) []*commonpb.KeyValue {
	if it.Len() == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, it.Len())
	for it.Next() {
		kv := it.Attribute()
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: valueProto(kv.Value)})
	}
	return out
}

// valueProto maps every attribute type; the typed slices become arrays of single values.
func valueProto(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.EMPTY:
		return &commonpb.AnyValue{}
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BYTESLICE:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}}
	case attribute.BOOLSLICE:
		return arrayProto(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return arrayProto(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return arrayProto(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return arrayProto(v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		return arrayProto(v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: attrsProto(v.AsMap())}}}
	}
	// A type newer than this code: say so rather than drop the attribute silently.
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "INVALID"}}
}

func arrayProto[T any](vals []T, wrap func(T) attribute.Value) *commonpb.AnyValue {
	arr := make([]*commonpb.AnyValue, len(vals))
	for i, v := range vals {
		arr[i] = valueProto(wrap(v))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: arr}}}
}

// unixNano clamps times before 1970 (the zero time of a span never ended) to 0.
func unixNano(t time.Time) uint64 {
	return uint64(max(0, t.UnixNano()))
}

func count(n int) uint32 {
	return uint32(min(max(int64(n), 0), math.MaxUint32))
}
