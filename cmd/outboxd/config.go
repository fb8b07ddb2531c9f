package main

import (
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

func configCmd(e env) error {
	if len(e.args) == 0 || e.args[0] != "check" {
		return usageError{"config: want the subcommand check"}
	}
	fs := newFlags("config check", e.stderr)
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
	fmt.Fprintf(e.stdout, "# configuration is valid; effective values, secrets redacted\n%s", cfg.YAML())
	return nil
}
