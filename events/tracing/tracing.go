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
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
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
// HTTP basic authentication. The exporter connects lazily, so an absent collector does
// not stop outboxd from starting: spans it cannot take are dropped, never waited for.
//
// shutdown flushes the spans still queued and stops the exporter; call it once, after
// the pipelines have stopped, with a context that bounds the flush.
func Setup(ctx context.Context, cfg config.Tracing, version string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !cfg.Enabled {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	opts, err := exporterOptions(cfg.Endpoint)
	if err != nil {
		return nil, nil, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := newResource(cfg.ServiceName, version)
	if err != nil {
		_ = exp.Shutdown(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	provider := newProvider(sdktrace.WithBatcher(exp), res, cfg.SampleRatio)
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

// exporterOptions turns the configured base URL into the exporter's endpoint, path,
// transport security and, from user info, an Authorization header.
func exporterOptions(endpoint string) ([]otlptracehttp.Option, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not quoted: it may hold a password.
		return nil, errors.New("tracing.endpoint: want an http:// or https:// collector URL")
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	path := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(path, tracesPath) {
		path += tracesPath
	}
	opts = append(opts, otlptracehttp.WithURLPath(path))
	if u.User != nil {
		pass, _ := u.User.Password()
		cred := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
		opts = append(opts, otlptracehttp.WithHeaders(map[string]string{"Authorization": "Basic " + cred}))
	}
	return opts, nil
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
