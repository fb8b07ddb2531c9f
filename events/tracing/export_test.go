package tracing

import (
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
