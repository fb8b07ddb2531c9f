package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// helpRequested is returned by a command asked for its help (-h, --help, or
// `outboxd help <verb>`): the help goes to stdout and the exit status is 0, because
// asking for help is not a mistake.
type helpRequested struct {
	verb  string
	flags *flag.FlagSet // nil when the verb takes no flags
}

func (h helpRequested) Error() string { return "help requested for " + h.verb }

// verbHelp is each verb's help: its synopsis and what it does. A test holds it to the
// verbs main dispatches, so a new verb without help fails the build's tests.
var verbHelp = map[string]string{
	"run": `Usage: outboxd run [--migrate] [--config FILE]

Deliver every stream's messages until SIGTERM or SIGINT. The admin endpoints
(http.addr) start first; while PostgreSQL is unreachable run keeps retrying
(database.connect_timeout bounds the wait) and /readyz answers 503. With
--migrate, pending migrations are applied once the database answers.
`,
	"demo": `Usage: outboxd demo [--messages N] [--json] [flags]

Produce, dispatch and consume N messages through an embedded NATS JetStream,
then show what arrived.
`,
	"bench": `Usage: outboxd bench [flags]

Measure this database and the brokers; see docs/benchmarks.md.
`,
	"stats": `Usage: outboxd stats [--json] [--config FILE]

Each stream's backlog: pending, leased, failed, deferred, oldest pending age.
`,
	"messages": `Usage: outboxd messages [--status S] [--stream S] [--since T] [--until T]
                        [--limit N] [--cursor C] [--json] [--config FILE]

List messages (no payloads), one page at a time.
`,
	"requeue": `Usage: outboxd requeue (--ids 1,2,3 | --stream S [--since T] [--until T] (--limit N | --all))
                       [--json] [--config FILE]

Put failed messages back in line, attempts reset.
`,
	"skip": `Usage: outboxd skip (--id N [--id M …] | --stream S --key K) [--json] [--config FILE]

Give up on messages for good so their keys continue: by id, or the head (first
undelivered message) of a key.
`,
	"migrate": `Usage: outboxd migrate <subcommand> [--config FILE]

Subcommands:
  up                 apply every pending schema migration, naming each one applied
  down (N | --all)   revert N migrations, or all of them
  version            print the applied and the expected schema version
  status             print the version, whether it is dirty, the layout and the
                     pending migrations
  sql (up | down)    print the migrations as SQL for psql, with your names
`,
	"config": `Usage: outboxd config check [--config FILE]

Validate the configuration and print it, secrets redacted.
`,
	"version": `Usage: outboxd version

Print the build version.
`,
	"help": `Usage: outboxd help [command]

Print the usage of outboxd, or of one command.
`,
}

// isHelpFlag reports whether arg asks for help the way the flag package understands it.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}

// printHelp writes a verb's help and its flags to w.
func printHelp(w io.Writer, h helpRequested) {
	fmt.Fprint(w, verbHelp[h.verb])
	if h.flags == nil {
		return
	}
	has := false
	h.flags.VisitAll(func(*flag.Flag) { has = true })
	if !has {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	h.flags.SetOutput(w)
	h.flags.PrintDefaults()
	h.flags.SetOutput(io.Discard)
}

// usageHint is the line after a usage error: where the right usage is to be found.
func usageHint(verb string) string {
	if _, ok := verbHelp[verb]; ok && verb != "" {
		return fmt.Sprintf("Run 'outboxd %s --help' for usage.", verb)
	}
	return "Run 'outboxd --help' for usage."
}

// helpCmd answers `outboxd help [verb]`: the verb's help, through the verb itself so its
// flags are listed as it defines them.
func helpCmd(e env, dispatch func(env) error) error {
	switch {
	case len(e.args) == 0:
		return helpRequested{verb: ""}
	case len(e.args) > 1:
		return usageError{msg: fmt.Sprintf("help: want one command, got %q", strings.Join(e.args, " "))}
	case isHelpFlag(e.args[0]) || e.args[0] == "help":
		return helpRequested{verb: "help"}
	}
	verb := e.args[0]
	if _, ok := verbHelp[verb]; !ok {
		return usageError{msg: fmt.Sprintf("help: unknown command %q", verb)}
	}
	err := dispatch(env{args: []string{verb, "--help"}, environ: e.environ, stdout: e.stdout, stderr: e.stderr})
	var h helpRequested
	if errors.As(err, &h) {
		return err
	}
	// Every verb answers --help before anything else; one that did not is a bug here.
	return fmt.Errorf("help: %s did not answer --help: %v", verb, err)
}

// verbNames lists the verbs with help, sorted, for tests and messages.
func verbNames() []string {
	names := make([]string, 0, len(verbHelp))
	for v := range verbHelp {
		names = append(names, v)
	}
	sort.Strings(names)
	return names
}
