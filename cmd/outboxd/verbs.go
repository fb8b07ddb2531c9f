package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/demo"
)

// The flag parsing of the verbs whose bodies live in internal/app, bench and demo.

func runCmd(ctx context.Context, e env) error {
	fs := newFlags("run", e.stderr)
	migrate := fs.Bool("migrate", false, "apply pending schema migrations before starting")
	if err := parseFlags(fs, e.args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("run: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	return app.Run(ctx, cfg, app.RunOptions{Migrate: *migrate, Version: version, Log: e.stderr})
}

func migrateCmd(ctx context.Context, e env) error {
	if len(e.args) == 0 {
		return usageError{msg: "migrate: want one of up, down, version, status, sql"}
	}
	sub := e.args[0]
	if isHelpFlag(sub) {
		fs := newFlags("migrate", e.stderr)
		fs.Bool("all", false, "with down: revert every migration (drops the outbox table and its rows)")
		return helpRequested{verb: "migrate", flags: fs}
	}
	fs := newFlags("migrate "+sub, e.stderr)
	all := false
	if sub == "down" {
		fs.BoolVar(&all, "all", false, "revert every migration (drops the outbox table and its rows)")
	}
	if err := parseFlags(fs, e.args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	steps := 0
	switch {
	case sub == "sql" && fs.NArg() != 1:
		return usageError{msg: "migrate sql: want the direction, up or down"}
	case sub == "sql":
		script, err := app.Layout(cfg).Script(cfg.Table(), fs.Arg(0))
		if err != nil {
			return usageError{msg: "migrate sql: " + err.Error()}
		}
		fmt.Fprint(e.stdout, script)
		return nil
	case sub == "up" || sub == "version" || sub == "status":
		if fs.NArg() > 0 {
			return usageError{msg: fmt.Sprintf("migrate %s: unexpected argument %q", sub, fs.Arg(0))}
		}
	case sub == "down" && all && fs.NArg() == 0:
	case sub == "down" && !all && fs.NArg() == 1:
		steps, err = strconv.Atoi(fs.Arg(0))
		if err != nil || steps < 1 {
			return usageError{msg: fmt.Sprintf("migrate down: want a positive number of steps, got %q", fs.Arg(0))}
		}
	case sub == "down":
		return usageError{msg: "migrate down: want a number of steps or --all"}
	default:
		return usageError{msg: fmt.Sprintf("migrate: unknown subcommand %q", sub)}
	}
	return app.Migrate(ctx, cfg, sub, steps, e.stdout)
}

func demoCmd(ctx context.Context, e env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	o := demo.DefaultOptions()
	fs.IntVar(&o.Messages, "messages", o.Messages, "messages to produce")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent producer goroutines, each committing transactions")
	fs.IntVar(&o.Batch, "batch", o.Batch, "messages per producer transaction")
	fs.IntVar(&o.RollbackEvery, "rollback-every", o.RollbackEvery, "roll back every Nth transaction on purpose (0: never)")
	fs.IntVar(&o.LoseAnswerEvery, "lose-answer-every", o.LoseAnswerEvery, "lose JetStream's answer to every Nth publish of a batch, as a dropped connection would: the dispatcher publishes it again and the stream's de-duplication drops the copies (0: never)")
	fs.BoolVar(&o.JSON, "json", o.JSON, "print the summary as one JSON object on stdout, and nothing else there")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up waiting for delivery after this long")
	if err := parseFlags(fs, e.args); err != nil {
		return err
	}
	o.DatabaseURL, o.Stdout, o.Stderr = lookupEnv(e.environ, "OUTBOXD_DATABASE_URL"), e.stdout, e.stderr
	return asUsage[demo.OptionError](demo.Run(ctx, o))
}

func benchCmd(ctx context.Context, e env) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o, drivers := bench.DefaultOptions(), strings.Join(bench.DriverTypes(), ", ")
	fs.IntVar(&o.Messages, "messages", o.Messages, "backlog size of the SQL ceiling and of each drain")
	fs.IntVar(&o.PayloadBytes, "payload", o.PayloadBytes, "payload bytes per message")
	fs.IntVar(&o.Keys, "keys", o.Keys, "distinct message keys")
	fs.BoolVar(&o.Ordered, "ordered", o.Ordered, "make the streams ordered (per-key FIFO, docs/ordering.md); --keys 1 is a single hot key")
	fs.IntVar(&o.Retained, "retained", o.Retained, "delivered rows kept in the table through every phase (e.g. 10000000)")
	fs.BoolVar(&o.Flow, "flow", o.Flow, "let pipelines flow under a high producer rate (streams.<name>.flow); --flow=false keeps every insert notifying")
	fs.StringVar(&o.Ack, "ack", o.Ack, "write-back of a confirmed message: update (mark delivered, run's default) or delete (as with janitor.retention 0)")
	fs.IntVar(&o.Streams, "streams", o.Streams, "streams the backlog is spread over, one pipeline each")
	fs.IntVar(&o.BatchSize, "batch", o.BatchSize, "rows per claim (batch_size); default: what outboxd run uses")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "batches in flight per stream (concurrency); default: what outboxd run uses")
	fs.IntVar(&o.Rate, "rate", o.Rate, "offered rate of the latency phase, messages/s")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", o.LatencyDuration, "how long the offered-rate latency phase runs")
	fs.IntVar(&o.IdleSamples, "idle-samples", o.IdleSamples, "messages sent one at a time through an idle pipeline")
	fs.StringVar(&o.Drivers, "drivers", o.Drivers, "drivers to measure, comma-separated: "+drivers)
	fs.StringVar(&o.DatabaseURL, "database-url", "", "PostgreSQL to measure (default $OUTBOXD_DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres); the bench uses schema "+bench.Schema+" only")
	fs.StringVar(&o.NATSURL, "nats-url", "", "use this NATS server (JetStream enabled for the jetstream driver) instead of an embedded one")
	fs.StringVar(&o.KafkaBrokers, "kafka-brokers", "", "use these Kafka brokers (host:port,...) instead of an embedded Kafka-protocol broker")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object with every figure instead of the table, and no progress")
	fs.BoolVar(&o.Quick, "quick", false, "small sizes, for tests and CI (flags given explicitly still win)")
	fs.StringVar(&o.Binary, "dispatcher-binary", "", "outboxd binary run as the drain's dispatcher process (default: this executable)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a phase after this long")
	if err := parseFlags(fs, e.args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("bench: unexpected argument %q", fs.Arg(0))}
	}
	o.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.Given[f.Name] = true })
	o.Environ, o.Version, o.Stdout, o.Stderr = e.environ, version, e.stdout, e.stderr
	return asUsage[bench.OptionError](bench.Run(ctx, o))
}

// asUsage turns a mistake in a verb's options, an error of type E, into a usage error.
func asUsage[E interface {
	~string
	error
}](err error) error {
	var oe E
	if errors.As(err, &oe) {
		return usageError{msg: oe.Error()}
	}
	return err
}

func lookupEnv(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
