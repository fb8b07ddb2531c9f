package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/store"
)

// ErrReported fails a command that has already printed why, one line per problem.
var ErrReported = errors.New("problems reported")

// probeTimeout bounds each dial and question of config check --connect.
const probeTimeout = 10 * time.Second

// ConnectCheck is `outboxd config check --connect`: it dials the database and every
// driver and asks each driver whether the destinations its streams publish to exist
// (router.Prober). It prints one line per problem, each saying what to do, and fails
// with ErrReported; or a short summary.
func ConnectCheck(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) error {
	var problems, oks []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// Every outbox's database; with an outboxes list each line names its outbox.
	for _, o := range cfg.Served() {
		one, label, key := cfg.ForOutbox(o), "", "database_url"
		if len(cfg.Outboxes) > 0 {
			label, key = "outbox "+o.Name+": ", "the outbox's database_url"
		}
		dbCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		st, closeStore, err := OpenStore(dbCtx, one)
		cancel()
		switch {
		case err == nil:
			closeStore()
			oks = append(oks, fmt.Sprintf("%sdatabase %s: connected, schema up to date", label, st.Table()))
			// The pooler probe and the listen URL, per outbox: each names its own.
			nOK, nProblems := len(oks), len(problems)
			oks, problems = poolerCheck(ctx, one, oks, problems)
			for i := nOK; i < len(oks); i++ {
				oks[i] = label + oks[i]
			}
			for i := nProblems; i < len(problems); i++ {
				problems[i] = label + problems[i]
			}
		case strings.HasPrefix(err.Error(), "connect to database") || strings.HasPrefix(err.Error(), "database_url"):
			problem("%sdatabase %s: %v: check %s and that PostgreSQL accepts connections", label, config.RedactDSN(one.DatabaseURL), err, key)
		default:
			problem("%sdatabase: %v", label, err)
		}
	}

	quiet := slog.New(slog.DiscardHandler)
	probers := map[string]router.Prober{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Drivers)) {
		dc := cfg.Drivers[name]
		if dc.Type == discard.Type {
			continue
		}
		drv, err := newDriver(name, dc, quiet)
		if err != nil {
			problem("driver %q: %v: fix drivers.%s", name, err, name)
			continue
		}
		defer drv.Close()
		p, ok := drv.(router.Prober)
		if !ok {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err = p.Probe(pctx, "")
		cancel()
		var missing *router.NoDestinationError
		switch {
		case errors.As(err, &missing):
			// Reached, but what the driver's own settings name is not there (a RabbitMQ
			// exchange).
			problem("driver %q: %s on %s: create it, or fix drivers.%s", name, missing, where(dc), name)
			continue
		case err != nil:
			problem("driver %q: cannot reach %s: %v: check the address and that the broker is up", name, where(dc), err)
			continue
		}
		probers[name] = p
		oks = append(oks, fmt.Sprintf("driver %q: reached %s", name, where(dc)))
	}

	type named struct {
		name string
		s    config.Stream
	}
	var streams []named // of every outbox
	for _, o := range cfg.Served() {
		for _, name := range slices.Sorted(maps.Keys(o.Streams)) {
			streams = append(streams, named{name, o.Streams[name]})
		}
	}
	for _, ns := range streams {
		name, s := ns.name, ns.s
		for _, d := range destinations(cfg, s) {
			p, ok := probers[d.driver]
			if !ok {
				continue // unreachable or nothing to ask: reported above
			}
			dc := cfg.Drivers[d.driver]
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			err := p.Probe(pctx, d.dest)
			cancel()
			var missing *router.NoDestinationError
			switch {
			case err == nil:
				oks = append(oks, fmt.Sprintf("stream %q: %s %q exists on driver %q", name, d.what, d.dest, d.driver))
			case errors.As(err, &missing) && summary(dc).Provision:
				oks = append(oks, fmt.Sprintf("stream %q: %s on %s; driver %q creates it (provision.enabled)", name, missing, where(dc), d.driver))
			case errors.As(err, &missing):
				problem("stream %q: %s on %s: %s, or set drivers.%s.provision.enabled: true", name, missing, where(dc), d.fix, d.driver)
			default:
				problem("stream %q: could not check %s %q on %s: %v: check that the broker is up and outboxd may read its metadata", name, d.what, d.dest, where(dc), err)
			}
		}
	}

	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return ErrReported
	}
	fmt.Fprintf(stdout, "OK: configuration valid; database, %d driver(s) and %d stream(s) checked\n", len(probers), len(cfg.Streams))
	for _, ok := range oks {
		fmt.Fprintln(stdout, "  "+ok)
	}
	return nil
}

// destination is one thing a stream publishes to that can be asked about before the
// first message.
type destination struct {
	driver, dest string
	what         string // "subject", "topic"
	fix          string // what creates it, as a clause
}

// destinations lists what can be known of s's destinations from the configuration: on
// JetStream, the subjects under its topic_prefix; its dead-letter topic. A Kafka topic or
// a subject without a prefix comes from each row, so only the cluster is checked.
func destinations(cfg *config.Config, s config.Stream) []destination {
	var out []destination
	add := func(driver, dest string) {
		switch cfg.Drivers[driver].Type {
		case jetstream.Type:
			out = append(out, destination{driver, dest, "subject", "create a stream capturing it"})
		case kafka.Type:
			out = append(out, destination{driver, dest, "topic", "create it"})
		}
	}
	if cfg.Drivers[s.Driver].Type == jetstream.Type && s.TopicPrefix != "" {
		add(s.Driver, s.TopicPrefix+">")
	}
	if dl := s.DeadLetter; dl.Driver != "" {
		add(dl.Driver, dl.Topic)
	}
	return out
}

// where names a driver's servers, credentials redacted.
func where(d config.Driver) string {
	return strings.Join(summary(d.Redacted()).Servers, ",")
}

// summary is what the driver's options say about its servers and provisioning.
func summary(d config.Driver) router.Summary {
	if s, ok := d.Options.(router.Summarizer); ok {
		return s.Summary()
	}
	return router.Summary{}
}

// OpenOutbox opens, as OpenStore does, the outbox of cfg that outbox and stream pick
// (ops.Pick: the named one, else the only one, else the only one configuring stream),
// and returns it with its configuration as if the only one and its name. A request
// that picks none is refused with ops.ErrInvalid.
func OpenOutbox(ctx context.Context, cfg *config.Config, outbox, stream string) (_ *store.Store, one *config.Config, name string, done func(), err error) {
	served := cfg.Served()
	targets := make([]ops.Target, len(served))
	for i, o := range served {
		targets[i] = ops.Target{Name: o.Name, Streams: slices.Sorted(maps.Keys(o.Streams))}
	}
	i, err := ops.Pick(targets, outbox, stream)
	if err != nil {
		return nil, nil, "", nil, err
	}
	one, name = cfg.ForOutbox(served[i]), served[i].Name
	st, done, err := OpenStore(ctx, one)
	if err != nil && len(cfg.Outboxes) > 0 {
		err = fmt.Errorf("outbox %s: %w", name, err)
	}
	return st, one, name, done, err
}

// OpenStore connects to the configured table with a small pool, for one command, and
// refuses a schema this build does not expect; done closes the pool.
func OpenStore(ctx context.Context, cfg *config.Config) (_ *store.Store, done func(), err error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("database_url: %w", config.RedactParseError(err))
	}
	behind, err := behindPooler(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if behind { // a command's statements through a transaction pooler: no named statements
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connect to database: %w", err)
	}
	st, err := store.New(pool, cfg.Table())
	if err == nil {
		err = CheckSchema(ctx, st, cfg.SessionURL())
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, pool.Close, nil
}

// ConfigCheck is `outboxd config check`: it prints the effective configuration, secrets
// redacted, or with connect runs ConnectCheck instead.
func ConfigCheck(ctx context.Context, cfg *config.Config, connect bool, stdout, stderr io.Writer) error {
	if connect {
		return ConnectCheck(ctx, cfg, stdout, stderr)
	}
	_, err := fmt.Fprintf(stdout, "# configuration is valid; effective values, secrets redacted\n%s", cfg.YAML())
	return err
}
