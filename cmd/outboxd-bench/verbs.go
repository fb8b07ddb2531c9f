package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/demo"
)

// The flag parsing of the verbs, whose bodies live in internal/bench and internal/demo.

const (
	benchHelp = `Usage: outboxd-bench bench [flags]
   or: outboxd bench [flags]

Measure this database and the brokers; see docs/benchmarks.md.
`
	demoHelp = `Usage: outboxd-bench demo [--messages N] [--json] [flags]
   or: outboxd demo [--messages N] [--json] [flags]

Produce, dispatch and consume N messages through a destination (--driver: by
default an embedded NATS JetStream), then show what arrived there.
`
)

func demoCmd(ctx context.Context, e env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	o := demo.DefaultOptions()
	o.Register(fs)
	if err := parseFlags(fs, e, demoHelp); err != nil {
		return err
	}
	o.DatabaseURL, o.Stdout, o.Stderr = lookupEnv(e.environ, "OUTBOXD_DATABASE_URL"), e.stdout, e.stderr
	return cli.AsUsage[demo.OptionError](demo.Run(ctx, o))
}

func benchCmd(ctx context.Context, e env) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := bench.DefaultOptions()
	o.Register(fs)
	if err := parseFlags(fs, e, benchHelp); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{Msg: fmt.Sprintf("bench: unexpected argument %q", fs.Arg(0))}
	}
	o.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.Given[f.Name] = true })
	o.Environ, o.Version, o.Stdout, o.Stderr = e.environ, version, e.stdout, e.stderr
	return cli.AsUsage[bench.OptionError](bench.Run(ctx, o))
}

// errHelpShown ends a verb asked for its help, which it printed: exit status 0.
var errHelpShown = errors.New("help shown")

// parseFlags parses e.args into fs. The flag package's own printing is silenced: a
// mistake becomes one line and a hint (run), and -h or --help the verb's help and
// flags on stdout.
func parseFlags(fs *flag.FlagSet, e env, help string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(e.args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, help, "\nFlags:\n")
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		return errHelpShown
	}
	if err != nil {
		return usageError{Msg: fs.Name() + ": " + err.Error()}
	}
	return nil
}

// isHelpFlag reports whether arg asks for help the way the flag package understands it.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}

func lookupEnv(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
