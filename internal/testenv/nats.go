package testenv

import (
	"net"
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
	s.Start()
	// Restarts reuse the port the first start was given, so clients reconnect.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Stop)
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
