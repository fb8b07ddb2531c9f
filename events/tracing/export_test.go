package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// NewProvider is Setup's provider around the given span processing, for tests.
func NewProvider(processing sdktrace.TracerProviderOption, service, version string, ratio float64) (*sdktrace.TracerProvider, error) {
	res, err := newResource(service, version)
	if err != nil {
		return nil, err
	}
	return newProvider(processing, res, ratio), nil
}

// NewExporter is the exporter Setup builds for endpoint (the environment not read), for
// tests: it trusts roots when given, and its retries wait from initial up to 4×initial,
// starting none after maxElapsed.
func NewExporter(endpoint string, roots *x509.CertPool, initial, maxElapsed time.Duration) (sdktrace.SpanExporter, error) {
	cfg, err := exporterConfigFor(endpoint, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	if roots != nil {
		cfg.tls = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	}
	e := newExporter(cfg)
	e.retry = retryPolicy{initial: initial, max: 4 * initial, maxElapsed: maxElapsed}
	return e, nil
}

// SetRequestTimeout changes how long one request of an exporter from NewExporter may take.
func SetRequestTimeout(e sdktrace.SpanExporter, d time.Duration) {
	e.(*exporter).client.Timeout = d
}
