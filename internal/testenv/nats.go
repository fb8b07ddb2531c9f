package testenv

import (
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSServer is an embedded NATS server with JetStream, on a random local port. It can be
// stopped and started again on the same port and store, as a broker outage would.
type NATSServer struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
	log  *testLogger
}

// BenchNATSURL is the server the NATS benchmarks publish to: OUTBOXD_BENCH_NATS_URL
// when set (JetStream enabled), so that their cpu-µs/msg is the client's alone, else an
// embedded server's URL, whose CPU time then counts as the benchmark's.
func BenchNATSURL(t testing.TB) string {
	if url := os.Getenv("OUTBOXD_BENCH_NATS_URL"); url != "" {
		return url
	}
	return NewNATS(t).URL()
}

// NewNATS starts an embedded NATS server with JetStream for t; it stops when t ends.
func NewNATS(t testing.TB) *NATSServer {
	t.Helper()
	s := &NATSServer{t: t, opts: server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}}
	s.log = &testLogger{t: t}
	s.Start()
	// Restarts reuse the port the first start was given, so clients reconnect.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Stop)
	t.Cleanup(s.log.stop) // runs first: nothing is logged to a finished test
	return s
}

// URL is the client URL, stable across Stop and Start.
func (s *NATSServer) URL() string { return s.srv.ClientURL() }

// Server exposes the embedded server for tests that inspect it.
func (s *NATSServer) Server() *server.Server { return s.srv }

// Start starts the server (again) and waits until it accepts connections.
func (s *NATSServer) Start() {
	s.t.Helper()
	opts := s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		s.t.Fatalf("testenv: create NATS server: %v", err)
	}
	srv.SetLoggerV2(s.log, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		s.t.Fatalf("testenv: NATS server did not become ready within 10s")
	}
	s.srv = srv
}

// Stop shuts the server down and waits until it has; calling it twice is harmless.
func (s *NATSServer) Stop() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// testLogger hands the server's warnings and errors to the test's log, so that a failure
// the server explains only in its log (a stream it could not create, say) says why.
type testLogger struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *testLogger) logf(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("nats-server %s: %s", level, fmt.Sprintf(format, v...))
	}
}

func (l *testLogger) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}

func (l *testLogger) Noticef(string, ...any)         {}
func (l *testLogger) Debugf(string, ...any)          {}
func (l *testLogger) Tracef(string, ...any)          {}
func (l *testLogger) Warnf(format string, v ...any)  { l.logf("warning", format, v...) }
func (l *testLogger) Errorf(format string, v ...any) { l.logf("error", format, v...) }
func (l *testLogger) Fatalf(format string, v ...any) { l.logf("fatal", format, v...) }
