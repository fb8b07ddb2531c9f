package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/console"
	"github.com/outboxd/outboxd/internal/ops"
)

// adminServer serves the admin endpoints of a running process. It listens before any
// dispatcher exists (listen), answering not ready while run waits for the databases,
// and switches to the full endpoints as dispatchers are built (serve). With one outbox,
// the endpoints wait for it; with an outboxes list, they serve at once, each outbox
// answering for itself: one that is not connected yet is not ready, and its API
// requests are refused with the reason.
type adminServer struct {
	outboxes []*outbox
	current  atomic.Pointer[http.Handler] // what the listener serves now
	mu       sync.Mutex                   // serialises serve
	// consoleOutboxes is what the web console (http.ui) shows now; serve updates it
	// as outboxes connect, while the console and its sessions live as long as the
	// listener.
	consoleOutboxes atomic.Pointer[[]console.Outbox]
}

// console returns the web console's handler, or nil when http.ui is off.
func (a *adminServer) console(cfg *config.Config, logger *slog.Logger) http.Handler {
	if cfg.HTTP.UI != config.UIOn && cfg.HTTP.UI != config.UIReadonly {
		return nil
	}
	waiting := make([]console.Outbox, len(a.outboxes))
	for i, o := range a.outboxes {
		streams, _ := ops.Describe(o.cfg)
		waiting[i] = console.Outbox{Name: o.name, Streams: streams}
	}
	a.consoleOutboxes.CompareAndSwap(nil, &waiting) // serve may have filled it already
	var version string
	if len(a.outboxes) > 0 {
		version = a.outboxes[0].version
	}
	return console.New(console.Options{Mode: cfg.HTTP.UI, AdminToken: cfg.HTTP.AdminToken, ReadToken: cfg.HTTP.ReadToken,
		Outboxes: func() []console.Outbox { return *a.consoleOutboxes.Load() }, Logger: logger, TraceURL: cfg.Tracing.UIURL,
		Version: version, Started: time.Now()})
}

// multi reports whether the process serves an outboxes list.
func (a *adminServer) multi() bool { return len(a.outboxes) > 0 && a.outboxes[0].multi }

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
	if a.multi() {
		a.serve(cfg, metrics, logger)
	} else {
		reason := &atomic.Pointer[string]{}
		if len(a.outboxes) > 0 {
			reason = &a.outboxes[0].reason
		}
		waiting := waitingHandler(metrics, reason)
		a.current.Store(&waiting)
	}
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
	ui := a.console(cfg, logger)
	if ui != nil {
		logger.Info("web console served", "path", console.Prefix, "mode", cfg.HTTP.UI)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case ui != nil && r.URL.Path == "/ui":
			http.Redirect(w, r, console.Prefix, http.StatusSeeOther)
		case ui != nil && strings.HasPrefix(r.URL.Path, console.Prefix):
			ui.ServeHTTP(w, r)
		default:
			(*a.current.Load()).ServeHTTP(w, r)
		}
	})
	go func() { served <- admin.ServeListener(ctx, ln, h) }()
	return func() error { cancel(); return <-served }, nil
}

// serve switches the listener to the admin endpoints of the outboxes as they are now;
// run calls it again whenever an outbox's dispatcher starts.
func (a *adminServer) serve(cfg *config.Config, metrics http.Handler, logger *slog.Logger) {
	if cfg.HTTP.Addr == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	opt := admin.Options{AdminToken: cfg.HTTP.AdminToken, ReadToken: cfg.HTTP.ReadToken, Metrics: metrics, Logger: logger}
	shown := make([]console.Outbox, 0, len(a.outboxes))
	for _, o := range a.outboxes {
		streams, drivers := ops.Describe(o.cfg)
		ao := admin.Outbox{Name: o.name, Waiting: o.waiting, Streams: streams, Drivers: drivers, Breakers: o.breakers.States}
		co := console.Outbox{Name: o.name, Streams: streams, Breakers: o.breakers.States, Activity: o.activity}
		if d := o.disp.Load(); d != nil {
			ao.Store, co.Store = d.store, d.store
			ao.Ready = []admin.Check{{Name: "listener", Probe: func(context.Context) error {
				if d.listener.Connected() {
					return nil
				}
				return errors.New("the LISTEN connection is down; reconnecting (polling continues meanwhile)")
			}}}
		}
		opt.Outboxes = append(opt.Outboxes, ao)
		shown = append(shown, co)
	}
	a.consoleOutboxes.Store(&shown)
	if !a.multi() {
		one := opt.Outboxes[0]
		if one.Store == nil {
			return // still waiting
		}
		opt.Store, opt.Streams, opt.Drivers, opt.Breakers, opt.Ready = one.Store, one.Streams, one.Drivers, one.Breakers, one.Ready
		opt.Outboxes = nil
	}
	h := admin.New(opt)
	a.current.Store(&h)
}
