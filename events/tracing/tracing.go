// Package tracing exports one OpenTelemetry span per published message, as a router
// middleware (Middleware): every message a router publishes, dead letters included, is
// traced on its way to the driver. It is internal to outboxd: no compatibility promise.
//
// Invariants: tracing never changes what is delivered or how it is acknowledged (the
// wrapped sender's results pass through untouched, and a message's headers are copied
// before the trace context is written into them, never edited in place); and when
// tracing is off nothing is wrapped, so the publish path is exactly the untraced one.
// Nothing here sets an OpenTelemetry global: the provider is passed to whoever needs it.
package tracing

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxd/outboxd/config"
)

// tracesPath is where an OTLP/HTTP collector takes traces under its base URL.
const tracesPath = "/v1/traces"

// Setup builds the tracer provider described by cfg. When cfg.Enabled is false it sets
// nothing up and returns a no-op provider, which Wrap recognises and does not wrap.
// Otherwise spans are batched in memory and exported over OTLP/HTTP to cfg.Endpoint, a
// collector's base URL (traces go to its /v1/traces); user info in that URL is sent as
// HTTP basic authentication, and the standard OTEL_EXPORTER_OTLP_ variables for headers,
// compression, timeout and certificates apply (exporterConfigFor). The exporter connects
// lazily, so an absent collector does not stop outboxd from starting: spans it cannot
// take are dropped, never waited for.
//
// shutdown flushes the spans still queued and stops the exporter; call it once, after
// the pipelines have stopped, with a context that bounds the flush.
func Setup(ctx context.Context, cfg config.Tracing, version string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !cfg.Enabled {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	ecfg, err := exporterConfigFor(cfg.Endpoint, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	ecfg.header.Set("User-Agent", "outboxd/"+version)
	res, err := newResource(cfg.ServiceName, version)
	if err != nil {
		return nil, nil, err
	}
	provider := newProvider(sdktrace.WithBatcher(newExporter(ecfg)), res, cfg.SampleRatio)
	return provider, provider.Shutdown, nil
}

// newProvider builds the provider Setup returns around any span processing: a sampled
// parent's decision is followed (so a trace the producer sampled is complete and one it
// dropped stays dropped), and a root is sampled at ratio.
func newProvider(processing sdktrace.TracerProviderOption, res *resource.Resource, ratio float64) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		processing,
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
}

// newResource describes this process: the SDK's defaults (including OTEL_RESOURCE_ATTRIBUTES)
// with service.name and service.version on top. Both use the SDK's semantic-convention
// schema, or Merge would refuse them.
func newResource(service, version string) (*resource.Resource, error) {
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(service),
		semconv.ServiceVersion(version),
	))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}
