package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/outboxd/outboxd/migrations"
)

func migrateCmd(ctx context.Context, e env) error {
	if len(e.args) == 0 {
		return usageError{msg: "migrate: want one of up, down, version, sql"}
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
	n := cfg.Table()
	layout := migrations.Plain
	if cfg.Janitor.Partitions.Enabled {
		layout = migrations.Partitioned
	}

	if sub == "sql" {
		if fs.NArg() != 1 {
			return usageError{msg: "migrate sql: want the direction, up or down"}
		}
		script, err := layout.Script(n, fs.Arg(0))
		if err != nil {
			return usageError{msg: "migrate sql: " + err.Error()}
		}
		fmt.Fprint(e.stdout, script)
		return nil
	}

	steps := 0
	switch sub {
	case "up", "version":
		if fs.NArg() > 0 {
			return usageError{msg: fmt.Sprintf("migrate %s: unexpected argument %q", sub, fs.Arg(0))}
		}
	case "down":
		switch {
		case all && fs.NArg() == 0:
		case !all && fs.NArg() == 1:
			steps, err = strconv.Atoi(fs.Arg(0))
			if err != nil || steps < 1 {
				return usageError{msg: fmt.Sprintf("migrate down: want a positive number of steps, got %q", fs.Arg(0))}
			}
		default:
			return usageError{msg: "migrate down: want a number of steps or --all"}
		}
	default:
		return usageError{msg: fmt.Sprintf("migrate: unknown subcommand %q", sub)}
	}

	m, err := layout.Open(ctx, cfg.DatabaseURL, n)
	if err != nil {
		return err
	}
	defer m.Close()
	switch sub {
	case "up":
		err = m.Up()
	case "down":
		err = m.Down(steps)
	}
	if err != nil {
		return err
	}
	v, dirty, err := m.Version()
	if err != nil {
		return err
	}
	state := "clean"
	if dirty {
		state = "dirty: a migration failed half-way; fix the schema by hand, then force the version with the migrate CLI"
	}
	fmt.Fprintf(e.stdout, "%s: schema version %d of %d (%s)\n", n, v, migrations.Latest(), state)
	if dirty {
		return errors.New("migration state is dirty")
	}
	return nil
}
