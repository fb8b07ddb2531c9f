package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/migrations"
)

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
	case "up", "version", "status":
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
	before, _, err := m.Version()
	if err != nil {
		return err
	}
	switch sub {
	case "up":
		err = m.Up()
	case "down":
		err = m.Down(steps)
	}
	// What was applied is reported even when a later migration failed.
	v, dirty, verr := m.Version()
	if verr != nil {
		return errors.Join(err, verr)
	}
	if sub == "up" {
		if reportErr := reportApplied(e, n.String(), layout, before, v); reportErr != nil {
			return errors.Join(err, reportErr)
		}
	}
	if err != nil {
		return err
	}
	state := "clean"
	if dirty {
		state = "dirty: a migration failed half-way; fix the schema by hand, then force the version with the migrate CLI"
	}
	if v == 0 && sub != "down" {
		// A table the migrate CLI created without recording its version where we read it
		// (up has already refused it with the same sentence).
		if err := migrations.Unrecorded(ctx, cfg.DatabaseURL, n); err != nil {
			return err
		}
	}
	if sub == "status" {
		return printStatus(e, n.String(), layout, v, state, dirty)
	}
	fmt.Fprintf(e.stdout, "%s: schema version %d of %d (%s)\n", n, v, migrations.Latest(), state)
	if dirty {
		return errors.New("migration state is dirty")
	}
	return nil
}

// reportApplied says which migrations an up applied, or that none was pending.
func reportApplied(e env, table string, layout migrations.Layout, before, after uint) error {
	applied, err := layout.Between(before, after)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "%s: no migration pending\n", table)
		return nil
	}
	for _, m := range applied {
		fmt.Fprintf(e.stdout, "%s: applied %s\n", table, m)
	}
	return nil
}

// printStatus is `migrate status`: where the schema is and what an up would apply.
func printStatus(e env, table string, layout migrations.Layout, v uint, state string, dirty bool) error {
	pending, err := layout.Between(v, migrations.Latest())
	if err != nil {
		return err
	}
	names := "none"
	if len(pending) > 0 {
		list := make([]string, len(pending))
		for i, m := range pending {
			list[i] = m.String()
		}
		names = strings.Join(list, ", ")
	}
	fmt.Fprintf(e.stdout, "table:   %s\nlayout:  %s (janitor.partitions.enabled)\nversion: %d of %d (%s)\npending: %s\n",
		table, layout, v, migrations.Latest(), state, names)
	if dirty {
		return errors.New("migration state is dirty")
	}
	return nil
}
