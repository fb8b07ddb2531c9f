package main

import (
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
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

// verbHelp is each verb's help, its synopsis and what it does, from help/VERB.txt. A
// test holds it to the verbs main dispatches, so a new verb without help fails the tests;
// outboxd-bench holds the help of bench and demo (siblingVerbs).
var verbHelp = map[string]string{}

//go:embed help/*.txt
var helpFiles embed.FS

func init() {
	files, _ := helpFiles.ReadDir("help")
	for _, f := range files {
		text, _ := helpFiles.ReadFile("help/" + f.Name())
		if verb := strings.TrimSuffix(f.Name(), ".txt"); verb == "outboxd" {
			usage = string(text)
		} else {
			verbHelp[verb] = string(text)
		}
	}
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
		return usageError{Msg: fmt.Sprintf("help: want one command, got %q", strings.Join(e.args, " "))}
	case isHelpFlag(e.args[0]) || e.args[0] == "help":
		return helpRequested{verb: "help"}
	}
	verb := e.args[0]
	if _, ok := verbHelp[verb]; !ok && !siblingVerbs[verb] {
		return usageError{Msg: fmt.Sprintf("help: unknown command %q", verb)}
	}
	err := dispatch(env{args: []string{verb, "--help"}, environ: e.environ, stdout: e.stdout, stderr: e.stderr})
	var h helpRequested
	if errors.As(err, &h) || siblingVerbs[verb] { // outboxd-bench answers for its verbs, or this says why not
		return err
	}
	// Every verb answers --help before anything else; one that did not is a bug here.
	return fmt.Errorf("help: %s did not answer --help: %w", verb, err)
}
