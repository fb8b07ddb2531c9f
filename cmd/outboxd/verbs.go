package main

import (
	"context"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/cli"
)

// The flag parsing of the verbs whose bodies live in internal/app. bench and demo live in
// outboxd-bench (forward.go).

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
		return usageError{Msg: "migrate: want one of up, down, version, status, sql"}
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
	return cli.AsUsage[app.UsageError](app.MigrateOutboxes(ctx, cfg, *outbox, sub, all, fs.Args(), e.stdout))
}
