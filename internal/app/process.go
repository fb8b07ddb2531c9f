package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/events/metrics"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/console"
)

// outbox is one outbox table a running process serves, with everything of its own: its
// configuration as if it were the only one, its metrics (labelled outbox=<name> when the
// process serves a list), its breaker board and, once its database answered, its
// dispatcher. Outboxes share nothing but the registry, the tracer and the admin
// listener, so a database that is down or slow holds back only its own outbox.
type outbox struct {
	name string
	// multi is set when the configuration has an outboxes list: names show in labels,
	// logs, spans and admin answers.
	multi    bool
	cfg      *config.Config
	log      *slog.Logger
	metrics  *metrics.Metrics
	breakers *admin.BreakerBoard
	// activity feeds the web console's throughput and dead-letter columns; nil while
	// the console is off.
	activity *console.Activity
	version  string // the build version, for the console's replicas page
	disp     atomic.Pointer[Dispatcher]
	reason   atomic.Pointer[string]
	first    *startTry // its first attempt at the start connections, begun by Run
}

// newOutboxes builds an outbox per served table, registering its metrics on reg.
func newOutboxes(cfg *config.Config, reg *prometheus.Registry, version string, logger *slog.Logger) []*outbox {
	multi := len(cfg.Outboxes) > 0
	var out []*outbox
	for _, o := range cfg.Served() {
		one := cfg.ForOutbox(o)
		ob := &outbox{name: o.Name, multi: multi, cfg: one, log: logger, version: version}
		var r prometheus.Registerer = reg
		if multi {
			// The same series for every outbox, told apart by a label: metric definitions,
			// dashboards and alert rules stay as they are.
			r = prometheus.WrapRegistererWith(prometheus.Labels{"outbox": o.Name}, reg)
			ob.log = logger.With("outbox", o.Name)
		}
		ob.metrics = newMetrics(r, one, version)
		ob.breakers = admin.NewBreakerBoard(sortedKeys(one.Streams))
		if one.HTTP.UI == config.UIOn || one.HTTP.UI == config.UIReadonly {
			ob.activity = console.NewActivity(nil)
		}
		out = append(out, ob)
	}
	return out
}

// notReady records why the outbox is not serving yet, for /readyz.
func (o *outbox) notReady(why string) { o.reason.Store(&why) }

// waiting says why the outbox is not serving yet.
func (o *outbox) waiting() string {
	if r := o.reason.Load(); r != nil {
		return *r
	}
	return "waiting for the database"
}

// options are the dispatcher options of the outbox: its metrics and breakers on its
// bus, and tracing with the outbox's name on its spans.
func (o *outbox) options(migrate bool, tp trace.TracerProvider, tracingOn bool) Options {
	opt := Options{Migrate: migrate}
	if tracingOn { // off: publishers are not wrapped at all
		systems := map[string]string{}
		for name, d := range o.cfg.Drivers {
			systems[name] = d.Type
		}
		label := ""
		if o.multi {
			label = o.name
		}
		opt.Middleware = append(opt.Middleware, tracing.OutboxMiddleware(tp, systems, label))
	}
	opt.Subscribe = func(bus *events.Bus) {
		bus.Subscribe("metrics", o.metrics.Handle) // synchronous: sees every event, never drops
		bus.Subscribe("admin-breakers", o.breakers.Observe, events.Filter(admin.IsBreakerChange))
		if o.activity != nil {
			bus.Subscribe("console-activity", o.activity.Observe, events.Filter(console.IsActivity))
		}
	}
	return opt
}

// run waits for the outbox's database, builds its dispatcher and runs it until ctx
// ends. connected is called once the dispatcher serves, with its shared poll, whose
// first answer may still be on its way. An error names the outbox when
// the process serves several.
func (o *outbox) run(ctx context.Context, migrate bool, tp trace.TracerProvider, tracingOn bool, connected func(*dispatch.Poller)) error {
	wrap := func(err error) error {
		if err == nil || !o.multi {
			return err
		}
		return fmt.Errorf("outbox %s: %w", o.name, err)
	}
	opt := o.options(migrate, tp, tracingOn)
	// A listening connection to database.listen_url begins to open now, with the two
	// that wait for the database; without it, the listener takes one of the two.
	if listensApart(o.cfg) {
		if listen, err := listenConfig(o.cfg); err == nil {
			opt.early = listenEarly(ctx, listen)
		}
	}
	conns, err := waitForDatabase(ctx, o.cfg, o.log, o.notReady, o.first)
	if err != nil {
		if opt.early != nil {
			go closeEarly(ctx, opt.early)
		}
		return wrap(err)
	}
	opt.start = conns
	d, err := NewDispatcher(ctx, o.cfg, o.log, opt)
	if err != nil {
		return wrap(err)
	}
	o.metrics.ObserveListener(d.listener)
	o.metrics.ObserveBus(d.bus, append([]string{"metrics", "admin-breakers", "failure-log"}, d.busSubscribers...)...)
	o.disp.Store(d)
	connected(d.poller)
	o.log.Info("dispatching", "streams", len(d.pipelines), "table", o.cfg.Table().String())
	return wrap(d.Run(ctx))
}
