package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// This file is the OTLP/HTTP exporter. It is outboxd's own rather than otlptracehttp:
// that module links google.golang.org/grpc (through the collector protos and genproto),
// gRPC links golang.org/x/net/trace and so html/template, and text/template turns off the
// linker's dead-code elimination of methods, which made the binary about a third larger.

const (
	contentTypeProtobuf = "application/x-protobuf"
	// defaultTimeout bounds one request, as otlptracehttp's default does.
	defaultTimeout = 10 * time.Second
	// maxResponse bounds what is read of a collector's answer; the rest is drained up to
	// the same size so that the connection can be reused, then dropped.
	maxResponse = 64 << 10
	// maxErrorBody is how much of a refusal's body an error quotes.
	maxErrorBody = 512
)

var errShutdown = errors.New("tracing: exporter is shut down")

// retryPolicy is the exponential backoff between attempts (otlptracehttp's defaults):
// each wait is the larger of the backoff, jittered by ±50%, and the collector's
// Retry-After, and no attempt starts after maxElapsed from the first.
type retryPolicy struct {
	initial, max, maxElapsed time.Duration
}

var defaultRetry = retryPolicy{initial: 5 * time.Second, max: 30 * time.Second, maxElapsed: time.Minute}

// exporterConfig is what Setup derives from the endpoint and the environment.
type exporterConfig struct {
	url     string // the traces URL, without user info
	header  http.Header
	gzip    bool
	timeout time.Duration
	tls     *tls.Config // nil: the system's roots, no client certificate
}

// exporter implements sdktrace.SpanExporter over OTLP/HTTP with binary protobuf.
type exporter struct {
	url    string
	header http.Header
	gzip   bool
	client *http.Client
	retry  retryPolicy
	// stopped ends when Shutdown is called; it also cancels the requests in flight.
	stopped context.Context
	stop    context.CancelFunc
}

var _ sdktrace.SpanExporter = (*exporter)(nil)

func newExporter(cfg exporterConfig) *exporter {
	// A transport of its own, like net/http's default, so that nobody else's changes to
	// http.DefaultTransport reach the exporter. Nothing connects until the first export.
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       cfg.tls,
	}
	timeout := cfg.timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	header := cfg.header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", contentTypeProtobuf)
	if cfg.gzip {
		header.Set("Content-Encoding", "gzip")
	}
	stopped, stop := context.WithCancel(context.Background())
	return &exporter{
		url:     cfg.url,
		header:  header,
		gzip:    cfg.gzip,
		client:  &http.Client{Transport: transport, Timeout: timeout},
		retry:   defaultRetry,
		stopped: stopped,
		stop:    stop,
	}
}

// ExportSpans sends spans in one request, retrying what the collector or the network
// says may succeed later until ctx ends, Shutdown is called or the retry policy gives up.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Err() != nil {
		return errShutdown
	}
	body, n, err := marshalRequest(spans)
	if err != nil {
		return fmt.Errorf("tracing: encode %d spans: %w", len(spans), err)
	}
	if n == 0 {
		return nil
	}
	if e.gzip {
		if body, err = gzipped(body); err != nil {
			return fmt.Errorf("tracing: compress %d spans: %w", n, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.stopped, cancel)()

	start := time.Now()
	backoff := e.retry.initial
	for attempt := 1; ; attempt++ {
		err := e.send(ctx, body, n)
		if err == nil {
			return nil
		}
		var retry *retryableError
		if !errors.As(err, &retry) {
			return fmt.Errorf("tracing: export of %d spans to %s: %w", n, e.url, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("tracing: export of %d spans to %s stopped after %d attempts: %w", n, e.url, attempt, err)
		}
		// Jitter keeps replicas that failed together from retrying together.
		wait := max(backoff/2+rand.N(backoff+1), retry.after)
		backoff = min(2*backoff, e.retry.max)
		// Give up now rather than sleep towards a wait that cannot end in time: the
		// batch processor holds newer spans meanwhile and drops what does not fit.
		if time.Since(start)+wait > e.retry.maxElapsed {
			return fmt.Errorf("tracing: export of %d spans to %s gave up after %d attempts: %w", n, e.url, attempt, err)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("tracing: export of %d spans to %s gave up after %d attempts, the next due after the deadline: %w", n, e.url, attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("tracing: export of %d spans to %s stopped after %d attempts: %w (%w)", n, e.url, attempt, err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// send makes one attempt. An error that a later attempt may not see is a *retryableError.
func (e *exporter) send(ctx context.Context, body []byte, n int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("tracing: export request: %w", err)
	}
	req.Header = e.header.Clone()
	resp, err := e.client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // the caller names the URL
		}
		if ctx.Err() == nil && transient(err) {
			return &retryableError{err: err}
		}
		return err
	}
	data, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	_ = resp.Body.Close()

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if readErr != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), contentTypeProtobuf) {
			return nil // the spans were taken; a partial-success report could not be read
		}
		return partialSuccess(data, n)
	case code == http.StatusTooManyRequests || code == http.StatusBadGateway ||
		code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		return &retryableError{after: retryAfter(resp.Header.Get("Retry-After")), err: statusError(resp.Status, data)}
	default:
		return statusError(resp.Status, data)
	}
}

// Shutdown stops the exporter: requests in flight are cancelled and every later
// ExportSpans fails without sending. Calling it again does nothing.
func (e *exporter) Shutdown(ctx context.Context) error {
	e.stop()
	e.client.CloseIdleConnections()
	return ctx.Err()
}

type retryableError struct {
	after time.Duration // the collector's Retry-After, 0 if none
	err   error
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// transient tells the network failures worth another attempt (refused, reset, timed out)
// from the ones that will repeat (a certificate that does not verify, a TLS alert).
func transient(err error) bool {
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	if errors.As(err, &certErr) || errors.As(err, &alert) {
		return false
	}
	var opErr *net.OpError
	var netErr net.Error
	return errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// retryAfter reads Retry-After as seconds or an HTTP date; 0 when absent or unreadable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(min(max(s, 0), int64(time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func statusError(status string, body []byte) error {
	b := strings.TrimSpace(string(body))
	if len(b) > maxErrorBody {
		b = b[:maxErrorBody] + "…"
	}
	if b == "" {
		b = "(empty body)"
	}
	return fmt.Errorf("%s: %s", status, strconv.Quote(b))
}

// partialSuccess reads an ExportTraceServiceResponse: a collector that took only some of
// the spans says how many it rejected and why in field 1 (ExportTracePartialSuccess:
// rejected_spans = 1, error_message = 2). Like otlptracehttp, that is an error, which
// the batch processor hands to otel.Handle; the request is not retried.
func partialSuccess(b []byte, n int) error {
	var rejected int64
	var msg string
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if num == 1 && typ == protowire.BytesType {
			ps, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil
			}
			rejected, msg = readPartialSuccess(ps)
			b = b[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return nil
		}
		b = b[l:]
	}
	if rejected == 0 && msg == "" {
		return nil
	}
	if msg == "" {
		msg = "no reason given"
	}
	return fmt.Errorf("collector rejected %d of %d spans: %s", rejected, n, msg)
}

func readPartialSuccess(b []byte) (rejected int64, msg string) {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return rejected, msg
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, l2 := protowire.ConsumeVarint(b)
			if l2 < 0 {
				return rejected, msg
			}
			rejected, l = int64(v), l2
		case num == 2 && typ == protowire.BytesType:
			v, l2 := protowire.ConsumeBytes(b)
			if l2 < 0 {
				return rejected, msg
			}
			msg, l = string(v), l2
		default:
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return rejected, msg
			}
		}
		b = b[l:]
	}
	return rejected, msg
}

func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
