package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/events/metrics"
	"github.com/outboxd/outboxd/events/tracing"
)

// RunOptions are what `outboxd run` takes besides the configuration.
type RunOptions struct {
	Migrate bool      // apply pending schema migrations once the database answers
	Version string    // the build version, logged and exported as a metric label
	Log     io.Writer // where the process logs go (stderr)
}

// Run is `outboxd run`: it serves the admin endpoints, waits for the database, builds
// and runs the dispatcher until ctx ends, and stops everything it started, in reverse
// order (the admin endpoints last, so that /metrics answers during the drain).
func Run(ctx context.Context, cfg *config.Config, o RunOptions) error {
	version := o.Version
	logger := NewLogger(cfg.Log, o.Log)
	logger.Info("outboxd starting", "version", version, "config", cfg)

	tp, shutdownTracing, err := tracing.Setup(ctx, cfg.Tracing, version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("flush traces", "err", err)
		}
	}()
	opt := Options{Migrate: o.Migrate}
	if cfg.Tracing.Enabled { // off: publishers are not wrapped at all
		systems := map[string]string{}
		for name, d := range cfg.Drivers {
			systems[name] = d.Type
		}
		opt.Middleware = append(opt.Middleware, tracing.Middleware(tp, systems))
	}
	reg, m := newMetrics(cfg, version)
	var adm adminServer
	subscribeAdmin := adm.subscribe(sortedKeys(cfg.Streams))
	opt.Subscribe = func(bus *events.Bus) {
		bus.Subscribe("metrics", m.Handle) // synchronous: sees every event, never drops
		subscribeAdmin(bus)
	}

	// The admin endpoints come first, so that /readyz can say why while run waits for
	// PostgreSQL; --migrate then runs once the database answers.
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)})
	stopAdmin, err := adm.listen(cfg, metricsHandler, logger)
	if err != nil {
		return err
	}
	if err := waitForDatabase(ctx, cfg, logger, adm.notReady); err != nil {
		return errors.Join(err, stopAdmin())
	}
	d, err := NewDispatcher(ctx, cfg, logger, opt)
	if err != nil {
		return errors.Join(err, stopAdmin())
	}
	m.ObserveListener(d.listener)
	m.ObserveBus(d.bus, append([]string{"metrics", "admin-breakers", "failure-log"}, d.busSubscribers...)...)
	adm.serve(cfg, d, metricsHandler, logger)
	logger.Info("dispatching", "streams", len(d.pipelines), "table", cfg.Table().String())
	err = d.Run(ctx)
	// The admin endpoints stop last, so /metrics and /healthz answer during the drain.
	err = errors.Join(err, stopAdmin())
	logger.Info("outboxd stopped", "err", err) // a nil err is left out (replaceAttr)
	return err
}

// newMetrics registers the Go and process collectors and every outboxd series, created
// at start for every configured stream and driver so alerts can tell zero from absent.
func newMetrics(cfg *config.Config, version string) (*prometheus.Registry, *metrics.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	streams := make(map[string]string, len(cfg.Streams))
	for name, s := range cfg.Streams {
		streams[name] = s.Driver
	}
	drivers := make(map[string]string, len(cfg.Drivers))
	for name, d := range cfg.Drivers {
		drivers[name] = d.Type
	}
	return reg, metrics.New(reg, streams, drivers, metrics.BuildInfo{Version: version})
}
