package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/migrations"
)

// Migrate is `outboxd migrate up|down|version|status` on the configured table, in the
// layout janitor.partitions.enabled names; steps is how many migrations down reverts
// (0: all of them). It prints what it did, and the state the schema is left in, to
// stdout.
func Migrate(ctx context.Context, cfg *config.Config, sub string, steps int, stdout io.Writer) error {
	n := cfg.Table()
	layout := Layout(cfg)
	m, err := layout.Open(ctx, cfg.SessionURL(), n)
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
		if reportErr := reportApplied(stdout, n.String(), layout, before, v); reportErr != nil {
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
		if err := migrations.Unrecorded(ctx, cfg.SessionURL(), n); err != nil {
			return err
		}
	}
	if sub == "status" {
		return printStatus(stdout, n.String(), layout, v, state, dirty)
	}
	fmt.Fprintf(stdout, "%s: schema version %d of %d (%s)\n", n, v, migrations.Latest(), state)
	if dirty {
		return errors.New("migration state is dirty")
	}
	return nil
}

// reportApplied says which migrations an up applied, or that none was pending.
func reportApplied(stdout io.Writer, table string, layout migrations.Layout, before, after uint) error {
	applied, err := layout.Between(before, after)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "%s: no migration pending\n", table)
		return nil
	}
	for _, m := range applied {
		fmt.Fprintf(stdout, "%s: applied %s\n", table, m)
	}
	return nil
}

// printStatus is `migrate status`: where the schema is and what an up would apply.
func printStatus(stdout io.Writer, table string, layout migrations.Layout, v uint, state string, dirty bool) error {
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
	fmt.Fprintf(stdout, "table:   %s\nlayout:  %s (janitor.partitions.enabled)\nversion: %d of %d (%s)\npending: %s\n",
		table, layout, v, migrations.Latest(), state, names)
	if dirty {
		return errors.New("migration state is dirty")
	}
	return nil
}

// UsageError is a mistake on a verb's command line found here, after its flags: the
// command line reports it as its own usage error.
type UsageError string

func (e UsageError) Error() string { return string(e) }

// MigrateOutboxes runs MigrateCommand on every outbox of cfg in turn, or on the one
// named outbox, each under a line naming it where cfg lists several; the first failure
// stops. Reverting drops rows, so with several outboxes down acts on a named one only.
func MigrateOutboxes(ctx context.Context, cfg *config.Config, outbox, sub string, all bool, args []string, stdout io.Writer) error {
	served := cfg.Served()
	if outbox != "" {
		served = slices.DeleteFunc(served, func(o config.Outbox) bool { return o.Name != outbox })
		if len(served) == 0 {
			return UsageError(fmt.Sprintf("migrate: no outbox named %q in the configuration", outbox))
		}
	}
	if len(served) > 1 && sub == "down" {
		return UsageError("migrate down: the configuration lists several outboxes; name one with --outbox")
	}
	for _, o := range served {
		if len(cfg.Outboxes) > 0 && sub != "sql" {
			fmt.Fprintf(stdout, "outbox %s:\n", o.Name)
		}
		err := MigrateCommand(ctx, cfg.ForOutbox(o), sub, all, args, stdout)
		var usage UsageError
		if err != nil && len(cfg.Outboxes) > 0 && !errors.As(err, &usage) {
			return fmt.Errorf("outbox %s: %w", o.Name, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// MigrateCommand is `outboxd migrate SUB [ARG]`, its flags parsed: it checks args, what
// the command line left after the flags, and runs SUB. sql prints the script of the
// direction args[0]; down reverts args[0] steps or, with all, every migration.
func MigrateCommand(ctx context.Context, cfg *config.Config, sub string, all bool, args []string, stdout io.Writer) error {
	steps := 0
	switch {
	case sub == "sql" && len(args) != 1:
		return UsageError("migrate sql: want the direction, up or down")
	case sub == "sql":
		script, err := Layout(cfg).Script(cfg.Table(), args[0])
		if err != nil {
			return UsageError("migrate sql: " + err.Error())
		}
		_, err = fmt.Fprint(stdout, script)
		return err
	case sub == "up" || sub == "version" || sub == "status":
		if len(args) > 0 {
			return UsageError(fmt.Sprintf("migrate %s: unexpected argument %q", sub, args[0]))
		}
	case sub == "down" && all && len(args) == 0:
	case sub == "down" && !all && len(args) == 1:
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			return UsageError(fmt.Sprintf("migrate down: want a positive number of steps, got %q", args[0]))
		}
		steps = n
	case sub == "down":
		return UsageError("migrate down: want a number of steps or --all")
	default:
		return UsageError(fmt.Sprintf("migrate: unknown subcommand %q", sub))
	}
	return Migrate(ctx, cfg, sub, steps, stdout)
}
