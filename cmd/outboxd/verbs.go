package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/demo"
)

// The flag parsing of the verbs whose bodies live in internal/app, bench and demo.

func runCmd(ctx context.Context, e env) error {
	fs := newFlags("run", e.stderr)
	migrate := fs.Bool("migrate", false, "apply pending schema migrations before starting")
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
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
	outbox := outboxFlag(fs)
	if err := parseFlags(fs, e.args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	return asUsage[app.UsageError](app.MigrateOutboxes(ctx, cfg, *outbox, sub, all, fs.Args(), e.stdout))
}

func demoCmd(ctx context.Context, e env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	o := demo.DefaultOptions()
	o.Register(fs)
	if err := parseFlags(fs, e.args); err != nil {
		return err
	}
	o.DatabaseURL, o.Stdout, o.Stderr = lookupEnv(e.environ, "OUTBOXD_DATABASE_URL"), e.stdout, e.stderr
	return asUsage[demo.OptionError](demo.Run(ctx, o))
}

func benchCmd(ctx context.Context, e env) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := bench.DefaultOptions()
	o.Register(fs)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
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
