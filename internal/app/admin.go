package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/ops"
)

// adminServer serves the admin endpoints of a running dispatcher. It listens before the
// dispatcher exists (listen), answering not ready while run waits for the database, and
// switches to the full endpoints once the dispatcher is built (serve).
type adminServer struct {
	breakers *admin.BreakerBoard
	current  atomic.Pointer[http.Handler] // what the listener serves now
	reason   atomic.Pointer[string]       // why /readyz says no while waiting
}

// notReady records why the replica is not ready yet, for /readyz while waiting.
func (a *adminServer) notReady(why string) { a.reason.Store(&why) }

// subscribe puts the breaker board on the bus; it must run before anything emits.
func (a *adminServer) subscribe(streams []string) func(bus *events.Bus) {
	a.breakers = admin.NewBreakerBoard(streams)
	return func(bus *events.Bus) {
		bus.Subscribe("admin-breakers", a.breakers.Observe, events.Filter(admin.IsBreakerChange))
	}
}

// isLoopback reports whether a listener accepts connections from this host only.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// listen serves on http.addr ("" disables it) until the returned stop is called: first
// the waiting endpoints, then, after serve, the full ones. It listens before returning,
// so a bad or busy address fails the start.
func (a *adminServer) listen(cfg *config.Config, metrics http.Handler, logger *slog.Logger) (stop func() error, err error) {
	if cfg.HTTP.Addr == "" {
		return func() error { return nil }, nil
	}
	waiting := waitingHandler(metrics, &a.reason)
	a.current.Store(&waiting)
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("http.addr: listen on %s: %w", cfg.HTTP.Addr, err)
	}
	logger.Info("admin endpoints listening", "addr", ln.Addr().String(), "requeue_enabled", cfg.HTTP.AdminToken != "",
		"reads_need_token", cfg.HTTP.AdminToken != "" || cfg.HTTP.ReadToken != "")
	if cfg.HTTP.AdminToken == "" && cfg.HTTP.ReadToken == "" && !isLoopback(ln.Addr()) {
		// Reads stay open without a token, for the loopback default; on another
		// address they show keys, topics and errors to whoever reaches it.
		logger.Warn("the admin API's reads are open to anyone who reaches http.addr: set http.read_token "+
			"(or http.admin_token) to require a token, or listen on 127.0.0.1", "addr", ln.Addr().String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*a.current.Load()).ServeHTTP(w, r) })
	go func() { served <- admin.ServeListener(ctx, ln, h) }()
	return func() error { cancel(); return <-served }, nil
}

// serve switches the listener to the full admin endpoints of d.
func (a *adminServer) serve(cfg *config.Config, d *Dispatcher, metrics http.Handler, logger *slog.Logger) {
	if cfg.HTTP.Addr == "" {
		return
	}
	streams, drivers := ops.Describe(cfg)
	var breakers func() map[string]string
	if a.breakers != nil {
		breakers = a.breakers.States
	}
	h := admin.New(admin.Options{
		Store: d.store, Streams: streams, Drivers: drivers, AdminToken: cfg.HTTP.AdminToken,
		ReadToken: cfg.HTTP.ReadToken,
		Ready: []admin.Check{{Name: "listener", Probe: func(context.Context) error {
			if d.listener.Connected() {
				return nil
			}
			return errors.New("the LISTEN connection is down; reconnecting (polling continues meanwhile)")
		}}},
		Metrics: metrics, Breakers: breakers, Logger: logger,
	})
	a.current.Store(&h)
}
