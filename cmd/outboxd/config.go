package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/config"
)

// loadConfig parses the --config flag from fs and loads the configuration.
func loadConfig(e env, fs *flag.FlagSet) (*config.Config, error) {
	file := fs.Lookup("config").Value.String()
	return config.Load(config.FilePath(file, e.environ), e.environ)
}

// newFlags returns a flag set for a subcommand with the flags every command shares.
func newFlags(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.String("config", "", "YAML configuration file (default $OUTBOXD_CONFIG)")
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

func configCmd(ctx context.Context, e env) error {
	if len(e.args) == 0 || e.args[0] != "check" {
		return usageError{"config: want the subcommand check"}
	}
	fs := newFlags("config check", e.stderr)
	connect := fs.Bool("connect", false, "also dial the database and every driver and check each stream's destination")
	if err := parseFlags(fs, e.args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("config check: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	if *connect {
		return connectCheck(ctx, cfg, e.stdout, e.stderr)
	}
	fmt.Fprintf(e.stdout, "# configuration is valid; effective values, secrets redacted\n%s", cfg.YAML())
	return nil
}
