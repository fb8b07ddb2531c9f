package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events/metrics"
	"github.com/outboxd/outboxd/events/tracing"
)

// RunOptions are what `outboxd run` takes besides the configuration.
type RunOptions struct {
	Migrate bool      // apply pending schema migrations once the database answers
	Version string    // the build version, logged and exported as a metric label
	Log     io.Writer // where the process logs go (stderr)
}

// Run is `outboxd run`: it serves the admin endpoints, and for every outbox the
// configuration serves, waits for its database, builds and runs its dispatcher until
// ctx ends; then it stops everything it started, in reverse order (the admin endpoints
// last, so that /metrics answers during the drain). Outboxes start and run on their
// own: one whose database is down keeps waiting (up to its connect_timeout) while the
// others dispatch. An outbox that cannot start at all (connect_timeout passed, a
// schema this build does not expect) stops the process, as a single outbox does.
func Run(ctx context.Context, cfg *config.Config, o RunOptions) error {
	version := o.Version
	logger := NewLogger(cfg.Log, o.Log)
	// Each outbox's first connections begin to open now, while the rest is set up, the
	// first log line included (startTry); an outbox's waitForDatabase takes them, and
	// what none took is closed.
	streamless := cfg.RequireStreams()
	tries := map[string]*startTry{}
	if streamless == nil {
		for _, o := range cfg.Served() {
			tries[o.Name] = tryStart(ctx, cfg.ForOutbox(o))
		}
	}
	defer func() {
		for _, t := range tries {
			t.discard()
		}
	}()
	logger.Info("outboxd starting", "version", version, "config", cfg)
	if streamless != nil {
		return streamless
	}

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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	outboxes := newOutboxes(cfg, reg, version, logger)
	for _, ob := range outboxes {
		ob.first = tries[ob.name]
	}

	// The admin endpoints come first, so that /readyz can say why while run waits for
	// PostgreSQL; --migrate then runs once the database answers.
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)})
	adm := &adminServer{outboxes: outboxes}
	stopAdmin, err := adm.listen(cfg, metricsHandler, logger)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	var dispatching atomic.Int32
	backlog := make(chan struct{}) // closed once an outbox's first poll woke a pipeline
	var metBacklog sync.Once
	for _, ob := range outboxes {
		g.Go(func() error {
			return ob.run(gctx, o.Migrate, tp, cfg.Tracing.Enabled, func(poll *dispatch.Poller) {
				adm.serve(cfg, metricsHandler, logger)
				go func() {
					select {
					case <-poll.Primed():
						if poll.PrimeWoke() {
							metBacklog.Do(func() { close(backlog) })
						}
					case <-gctx.Done():
					}
				}()
				if int(dispatching.Add(1)) == len(outboxes) {
					// Every outbox has started: what the start alone touched of the
					// executable need not stay resident (startpages.go).
					go releaseStartPagesAfter(gctx, startSettle, backlog, logger)
				}
			})
		})
	}
	err = g.Wait()
	// The admin endpoints stop last, so /metrics and /healthz answer during the drain.
	err = errors.Join(err, stopAdmin())
	logger.Info("outboxd stopped", "err", err) // a nil err is left out (replaceAttr)
	return err
}

// newMetrics creates every outboxd series of one outbox on reg, at start, for every
// configured stream and driver, so alerts can tell zero from absent.
func newMetrics(reg prometheus.Registerer, cfg *config.Config, version string) *metrics.Metrics {
	streams := make(map[string]string, len(cfg.Streams))
	for name, s := range cfg.Streams {
		streams[name] = s.Driver
	}
	drivers := make(map[string]string, len(cfg.Drivers))
	for name, d := range cfg.Drivers {
		drivers[name] = d.Type
	}
	return metrics.New(reg, streams, drivers, metrics.BuildInfo{Version: version})
}
