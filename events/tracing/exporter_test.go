package tracing_test

import (
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/router"
)

// oneSpan is a finished span to export.
func oneSpan(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, s := tp.Tracer("test").Start(context.Background(), "one")
	s.End()
	return rec.Ended()
}

// answering starts a collector that answers request i (from 0) with answer(i) and counts
// the requests.
func answering(t *testing.T, answer func(i int64, w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answer(n.Add(1)-1, w)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func newExporter(t *testing.T, url string, initial, maxElapsed time.Duration) sdktrace.SpanExporter {
	t.Helper()
	e, err := tracing.NewExporter(url, nil, initial, maxElapsed)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestExporterRetriesAnUnavailableCollectorUntilItTakesTheSpans(t *testing.T) {
	t.Parallel()
	srv, n := answering(t, func(i int64, w http.ResponseWriter) {
		if i < 2 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	})
	e := newExporter(t, srv.URL, time.Millisecond, 10*time.Second)
	if err := e.ExportSpans(context.Background(), oneSpan(t)); err != nil {
		t.Fatalf("export: %v", err)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("%d requests, want 3 (two 503s, then success)", got)
	}
}

func TestExporterWaitsWhatRetryAfterSaysWithinItsBounds(t *testing.T) {
	t.Parallel()
	srv, n := answering(t, func(i int64, w http.ResponseWriter) {
		if i == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	e := newExporter(t, srv.URL, time.Millisecond, 10*time.Second)
	start := time.Now()
	if err := e.ExportSpans(context.Background(), oneSpan(t)); err != nil {
		t.Fatalf("export: %v", err)
	}
	if took := time.Since(start); took < time.Second || n.Load() != 2 {
		t.Errorf("%d requests in %s, want 2 with the 1s the collector asked for between them", n.Load(), took)
	}

	// A wait longer than the retry policy allows is not waited for.
	far, n := answering(t, func(_ int64, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	e = newExporter(t, far.URL, time.Millisecond, 10*time.Second)
	start = time.Now()
	err := e.ExportSpans(context.Background(), oneSpan(t))
	if err == nil || !strings.Contains(err.Error(), "503") || n.Load() != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("Retry-After: 3600 gave %v after %d requests and %s; want a prompt error naming the 503 after 1",
			err, n.Load(), time.Since(start))
	}
}

func TestExporterDoesNotRetryARefusalAndQuotesIt(t *testing.T) {
	t.Parallel()
	srv, n := answering(t, func(_ int64, w http.ResponseWriter) {
		http.Error(w, "span 1: trace id is empty", http.StatusBadRequest)
	})
	e := newExporter(t, srv.URL, time.Millisecond, 10*time.Second)
	err := e.ExportSpans(context.Background(), oneSpan(t))
	if err == nil || !strings.Contains(err.Error(), "400 Bad Request") || !strings.Contains(err.Error(), "trace id is empty") {
		t.Errorf("export: %v, want an error naming 400 Bad Request and the collector's reason", err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d requests, want 1: a 400 is not retried", got)
	}
}

func TestExporterStopsRetryingWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, n := answering(t, func(_ int64, w http.ResponseWriter) {
		time.AfterFunc(100*time.Millisecond, cancel) // while the exporter waits to retry
		w.WriteHeader(http.StatusBadGateway)
	})
	e := newExporter(t, srv.URL, time.Second, time.Minute) // first wait 0.5–1.5s
	start := time.Now()
	err := e.ExportSpans(ctx, oneSpan(t))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "502") {
		t.Errorf("export: %v, want the cancellation and the last 502", err)
	}
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Errorf("export returned %s after it started, want soon after the cancellation at 100ms", took)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d requests, want 1: none after the context ended", got)
	}
}

func TestExporterGivesUpBeforeAWaitThatOutlastsTheDeadline(t *testing.T) {
	t.Parallel()
	srv, n := answering(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(http.StatusGatewayTimeout) })
	e := newExporter(t, srv.URL, 10*time.Second, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.ExportSpans(ctx, oneSpan(t)); err == nil || time.Since(start) > time.Second || n.Load() != 1 {
		t.Errorf("export: %v after %s and %d requests, want an error at once after 1", err, time.Since(start), n.Load())
	}
}

func TestExporterAbandonsAHungRequestAndRetries(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, n := answering(t, func(i int64, _ http.ResponseWriter) {
		if i == 0 {
			<-release
		}
	})
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handler
	e := newExporter(t, srv.URL, time.Millisecond, 10*time.Second)
	tracing.SetRequestTimeout(e, 100*time.Millisecond)
	start := time.Now()
	if err := e.ExportSpans(context.Background(), oneSpan(t)); err != nil || n.Load() != 2 || time.Since(start) > 5*time.Second {
		t.Errorf("export: %v after %d requests and %s, want success on the 2nd after the 1st timed out",
			err, n.Load(), time.Since(start))
	}
}

func TestExporterRetriesARefusedConnection(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	e := newExporter(t, url, time.Millisecond, 200*time.Millisecond)
	err := e.ExportSpans(context.Background(), oneSpan(t))
	if err == nil || !strings.Contains(err.Error(), "gave up after") {
		t.Errorf("export to a closed port: %v, want retries that give up", err)
	}
}

func TestExporterReportsSpansTheCollectorRejected(t *testing.T) {
	t.Parallel()
	resp, err := proto.Marshal(&coltrace.ExportTraceServiceResponse{PartialSuccess: &coltrace.ExportTracePartialSuccess{
		RejectedSpans: 1, ErrorMessage: "span too old",
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv, n := answering(t, func(_ int64, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	})
	e := newExporter(t, srv.URL, time.Millisecond, time.Second)
	err = e.ExportSpans(context.Background(), oneSpan(t))
	if err == nil || !strings.Contains(err.Error(), "rejected 1 of 1 spans: span too old") || n.Load() != 1 {
		t.Errorf("export: %v after %d requests, want the rejection reported after 1", err, n.Load())
	}
}

func TestExporterExportsNothingOnceShutDown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, n := answering(t, func(i int64, _ http.ResponseWriter) {
		if i == 0 {
			<-release
		}
	})
	t.Cleanup(func() { close(release) })
	e := newExporter(t, srv.URL, time.Millisecond, time.Second)
	done := make(chan error, 1)
	go func() { done <- e.ExportSpans(context.Background(), oneSpan(t)) }()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 2 { // idempotent
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the export in flight at Shutdown succeeded, want it cancelled")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not cancel the export in flight")
	}
	if err := e.ExportSpans(context.Background(), oneSpan(t)); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Errorf("export after Shutdown: %v, want an error saying so", err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d requests, want 1: nothing is sent after Shutdown", got)
	}
}

func TestExporterSpeaksTLSToAnHTTPSCollector(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && r.Header.Get("Authorization") == "Basic dTpw" { // u:p
			got.Add(1)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake below fails on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := strings.Replace(srv.URL, "https://", "https://u:p@", 1)

	// Not trusted: a certificate that does not verify is not retried.
	e := newExporter(t, url, time.Millisecond, 10*time.Second)
	var certErr x509.UnknownAuthorityError
	if err := e.ExportSpans(context.Background(), oneSpan(t)); !errors.As(err, &certErr) || strings.Contains(err.Error(), "u:p@") {
		t.Errorf("export to an untrusted collector: %v, want the unknown authority and no password", err)
	}

	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	trusted, err := tracing.NewExporter(url, roots, time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := trusted.ExportSpans(context.Background(), oneSpan(t)); err != nil || got.Load() != 1 {
		t.Errorf("export over TLS: %v, %d authenticated TLS requests, want 1", err, got.Load())
	}
}

// Not parallel: the standard variables are read from the process environment.
func TestSetupReadsTheStandardOTLPVariables(t *testing.T) {
	type seen struct{ header, encoding string }
	got := make(chan seen, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{header: r.Header.Get("X-Api-Key") + "|" + r.Header.Get("Authorization"), encoding: r.Header.Get("Content-Encoding")}
		zr, err := gzip.NewReader(r.Body)
		if err == nil {
			var req coltrace.ExportTraceServiceRequest
			body, _ := io.ReadAll(zr)
			if proto.Unmarshal(body, &req) != nil || len(req.GetResourceSpans()) != 1 {
				s.encoding += " (undecodable)"
			}
		}
		got <- s
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%20b, other=1")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip") // the traces form wins

	tp, shutdown, err := tracing.Setup(context.Background(), config.Tracing{
		Enabled: true, Endpoint: strings.Replace(srv.URL, "https://", "https://u:p@", 1), SampleRatio: 1, ServiceName: "s",
	}, "v")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	tracing.Wrap((&recorder{}).Publish, tp, "nats")(context.Background(), []router.Message{{ID: 1, Stream: "s", Topic: "t"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case s := <-got:
		if s.header != "a b|Basic dTpw" || s.encoding != "gzip" {
			t.Errorf("collector saw header %q and encoding %q, want \"a b|Basic dTpw\" and gzip", s.header, s.encoding)
		}
	default:
		t.Fatal("the collector received nothing: the CA file was not trusted?")
	}

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd")
	if _, _, err := tracing.Setup(context.Background(), config.Tracing{Enabled: true, Endpoint: srv.URL, SampleRatio: 1, ServiceName: "s"}, "v"); err == nil ||
		!strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION") {
		t.Errorf("Setup with an unknown compression: %v, want an error naming the variable", err)
	}
}
