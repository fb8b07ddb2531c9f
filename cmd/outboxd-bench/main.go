// Command outboxd-bench carries outboxd's bench and demo verbs, the ones that embed
// brokers: a NATS server with JetStream, the kfake Kafka-protocol broker and franz-go.
// `make build` builds it beside outboxd, and `outboxd bench` and `outboxd demo` exec it
// from there, so the outboxd every deployment runs links none of those. It parses the
// command line, answers help and maps errors to exit codes as outboxd does (0, 1 for a
// failure, 2 for a mistake on the command line); internal/bench and internal/demo do
// the work.
//
// Invariant: outboxd-bench never dispatches an application's outbox. It has no run
// verb: the bench's drains run the outboxd beside it (or --dispatcher-binary) as a
// child process, the demo's dispatcher runs on the demo's own schema, and both write
// only to schemas of their own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…", as outboxd's.
var version = "dev"

// usageError is a mistake on the command line: exit status 2 after one line and a hint
// naming the help of the verb it concerns (Verb, filled in by runCommand).
type usageError = cli.UsageError

// env is what a verb may read from its surroundings, so tests run verbs in-process.
type env struct {
	args    []string
	environ []string
	stdout  io.Writer
	stderr  io.Writer
}

func main() {
	bench.ExitIfClaimer() // the replicas mode's claimer processes are this executable
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, env{args: os.Args[1:], environ: os.Environ(), stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// run executes one command and returns the process exit status.
func run(ctx context.Context, e env) int {
	err := runCommand(ctx, e)
	var ue usageError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return 0
	case errors.As(err, &ue):
		hint := "outboxd-bench --help"
		if ue.Verb != "" {
			hint = "outboxd-bench " + ue.Verb + " --help"
		}
		fmt.Fprintf(e.stderr, "outboxd-bench: %s\nRun '%s' for usage.\n", strings.ReplaceAll(ue.Msg, "\n", " "), hint)
		return 2
	default:
		fmt.Fprintf(e.stderr, "outboxd-bench: %v\n", err)
		return 1
	}
}

// verbs maps each verb to its help and its implementation; help and version take no
// flags of their own.
var verbs = map[string]struct {
	help string
	run  func(context.Context, env) error
}{
	"bench": {benchHelp, benchCmd},
	"demo":  {demoHelp, demoCmd},
}

const usage = `outboxd-bench measures outboxd and demonstrates it, with embedded brokers.

Usage:
  outboxd-bench <command> [flags]     (also: outboxd <command> [flags], which runs this)

Commands:
  bench [flags]              measure this database and the brokers: see docs/benchmarks.md
  demo [--messages N] [--json]
                             produce, dispatch and consume N messages through an
                             embedded NATS JetStream, then show what arrived
  version                    print the build version
  help [command]             print this, or one command's usage (also: <command> --help)

The bench runs the outboxd beside this executable as its dispatcher (--dispatcher-binary
names another); make build builds both.
`

func runCommand(ctx context.Context, e env) error {
	if len(e.args) == 0 {
		return usageError{Msg: "no command given"}
	}
	verb, rest := e.args[0], e.args[1:]
	switch {
	case isHelpFlag(verb) || (verb == "help" && len(rest) == 0):
		fmt.Fprint(e.stdout, usage)
		return nil
	case verb == "help" && len(rest) == 1:
		verb, rest = rest[0], []string{"--help"}
	case verb == "help":
		return usageError{Msg: fmt.Sprintf("help: want one command, got %q", strings.Join(rest, " "))}
	case (verb == "version" || verb == "--version") && len(rest) > 0:
		return usageError{Msg: fmt.Sprintf("version: unexpected argument %q", rest[0])}
	case verb == "version" || verb == "--version":
		fmt.Fprintf(e.stdout, "outboxd-bench %s (%s)\n", version, goVersion())
		return nil
	}
	v, ok := verbs[verb]
	if !ok {
		return usageError{Msg: fmt.Sprintf("unknown command %q", verb)}
	}
	e.args = rest
	err := v.run(ctx, e)
	var ue usageError
	if errors.As(err, &ue) && ue.Verb == "" {
		ue.Verb = verb
		return ue
	}
	return err
}

func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "unknown Go version"
}
