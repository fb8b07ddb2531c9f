// Command outboxd delivers rows of a transactional outbox table in PostgreSQL to Kafka
// and NATS. It parses the command line, answers help and maps errors to exit codes;
// configuration and hands over to the packages that do the work.
//
// Invariant: outboxd links neither internal/bench nor internal/demo, nor the brokers they
// embed; its bench and demo verbs exec the outboxd-bench beside it (forward.go), and
// TestOutboxdLinksNoneOfTheBenchsBrokers holds the built binary to that.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// usageError is a mistake on the command line: exit status 2 after one line and a hint
// naming the help of the verb it concerns (Verb, filled in by runCommand).
type usageError = cli.UsageError

// usage is the help of outboxd itself, from help/outboxd.txt (help.go).
var usage string

// env is what a command may read from its surroundings, so tests can run commands
// without touching the process environment.
type env struct {
	args    []string
	environ []string
	stdout  io.Writer
	stderr  io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, env{args: os.Args[1:], environ: os.Environ(), stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// run executes one command and returns the process exit status.
func run(ctx context.Context, e env) int {
	err := runCommand(ctx, e)
	var ue usageError
	var help helpRequested
	switch {
	case err == nil:
		return 0
	case errors.Is(err, app.ErrReported):
		return 1
	case errors.As(err, &help):
		if help.verb == "" {
			fmt.Fprint(e.stdout, usage)
		} else {
			printHelp(e.stdout, help)
		}
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "outboxd: %s\n%s\n", strings.ReplaceAll(ue.Msg, "\n", " "), usageHint(ue.Verb))
		return 2
	default:
		fmt.Fprintf(e.stderr, "outboxd: %v\n", err)
		return 1
	}
}

// commands maps each verb to its implementation. Every verb answers -h and --help
// before doing anything else (TestEveryVerbAnswersHelp holds them to it); bench and demo
// by outboxd-bench, which they exec (forward.go).
var commands map[string]func(context.Context, env) error

func init() {
	commands = map[string]func(context.Context, env) error{
		"run":      runCmd,
		"demo":     forwardCmd("demo"),
		"stats":    statsCmd,
		"messages": messagesCmd,
		"requeue":  requeueCmd,
		"skip":     skipCmd,
		"replay":   replayCmd,
		"bench":    forwardCmd("bench"),
		"migrate":  migrateCmd,
		"config":   configCmd,
		"version":  versionCmd,
		"help": func(ctx context.Context, e env) error {
			return helpCmd(e, func(e env) error { return runCommand(ctx, e) })
		},
	}
}

func runCommand(ctx context.Context, e env) error {
	if len(e.args) == 0 {
		return usageError{Msg: "no command given"}
	}
	verb, rest := e.args[0], e.args[1:]
	e.args = rest
	switch {
	case isHelpFlag(verb):
		return helpRequested{verb: ""}
	case verb == "--version":
		verb = "version"
	}
	cmd, ok := commands[verb]
	if !ok {
		return usageError{Msg: fmt.Sprintf("unknown command %q", verb)}
	}
	err := cmd(ctx, e)
	var ue usageError
	if errors.As(err, &ue) && ue.Verb == "" {
		ue.Verb = verb
		return ue
	}
	return err
}

func versionCmd(_ context.Context, e env) error {
	if slices.ContainsFunc(e.args, isHelpFlag) {
		return helpRequested{verb: "version"}
	}
	if len(e.args) > 0 {
		return usageError{Msg: fmt.Sprintf("version: unexpected argument %q", e.args[0])}
	}
	fmt.Fprintf(e.stdout, "outboxd %s (%s)\n", version, goVersion())
	return nil
}

func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "unknown Go version"
}
