package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/router/drivers"
)

// loadConfig parses the --config flag from fs and loads the configuration.
func loadConfig(e env, fs *flag.FlagSet) (*config.Config, error) {
	file := fs.Lookup("config").Value.String()
	return config.Load(config.FilePath(file, e.environ), e.environ, drivers.All())
}

// newFlags returns a flag set for a subcommand with the flags every command shares.
func newFlags(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.String("config", "", "YAML configuration file (default $OUTBOXD_CONFIG)")
	return fs
}

// parseFlags parses args into fs. The flag package's own printing is silenced: a mistake
// becomes one line and a hint (run), and -h or --help this verb's help on stdout.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return helpRequested{verb: strings.Fields(fs.Name())[0], flags: fs}
	}
	if err != nil {
		return usageError{Msg: fs.Name() + ": " + err.Error()}
	}
	return nil
}

func configCmd(ctx context.Context, e env) error {
	if len(e.args) > 0 && isHelpFlag(e.args[0]) {
		return helpRequested{verb: "config", flags: newFlags("config", e.stderr)}
	}
	if len(e.args) == 0 || e.args[0] != "check" {
		return usageError{Msg: "config: want the subcommand check"}
	}
	fs := newFlags("config check", e.stderr)
	connect := fs.Bool("connect", false, "also dial the database and every driver and check each stream's destination")
	if err := parseNoArgs(fs, e.args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	return app.ConfigCheck(ctx, cfg, *connect, e.stdout, e.stderr)
}
