package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/testenv"
)

// TestMain runs the tests, or a claimer process of the replicas mode when a bench run
// here starts this test binary as one.
func TestMain(m *testing.M) {
	bench.ExitIfClaimer()
	testenv.Main(m)
}

// outboxdBench runs one command in-process and returns its exit status and output.
func outboxdBench(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), env{args: args, environ: environ, stdout: &out, stderr: &errOut})
	return code, out.String(), errOut.String()
}

// dispatcher builds outboxd into a temporary directory. The bench runs the drain's
// dispatcher as a child process, by default the outboxd beside its own executable; inside
// `go test` that is the test binary, which the bench refuses, so the tests hand it a real
// outboxd with --dispatcher-binary.
func dispatcher(t *testing.T) string {
	t.Helper()
	return testenv.GoBuild(t, "../outboxd", filepath.Join(t.TempDir(), "outboxd"))
}

// dispatcherWithFloor is dispatcher with both builds of outboxd-floor beside it, as
// make build lays them out, so that the bench times the floors too.
func dispatcherWithFloor(t *testing.T) string {
	t.Helper()
	bin := dispatcher(t)
	testenv.GoBuild(t, "../outboxd-floor", filepath.Join(filepath.Dir(bin), "outboxd-floor"))
	testenv.GoBuild(t, "../outboxd-floor", filepath.Join(filepath.Dir(bin), "outboxd-floor-linked"), "linked")
	return bin
}

func TestEveryVerbAnswersHelpAndRefusesUnknownFlags(t *testing.T) {
	t.Parallel()
	for verb := range verbs {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{{"help", verb}, {verb, "--help"}, {verb, "-h"}} {
				code, out, errOut := outboxdBench(t, nil, args...)
				if code != 0 || !strings.HasPrefix(out, "Usage: outboxd-bench "+verb) || !strings.Contains(out, "\nFlags:\n  -") || errOut != "" {
					t.Errorf("outboxd-bench %s: exit %d, stdout %q, stderr %q; want exit 0, the usage and the flags on stdout",
						strings.Join(args, " "), code, out, errOut)
				}
			}
			code, out, errOut := outboxdBench(t, nil, verb, "--no-such-flag")
			want := "outboxd-bench: " + verb + ": flag provided but not defined: -no-such-flag\nRun 'outboxd-bench " + verb + " --help' for usage.\n"
			if code != 2 || out != "" || errOut != want {
				t.Errorf("outboxd-bench %s --no-such-flag: exit %d, stdout %q, stderr %q; want exit 2 and %q", verb, code, out, errOut, want)
			}
		})
	}
}

func TestTheTopLevelAnswersHelpAndVersionAndRefusesTheRest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args   []string
		code   int
		stdout string // its beginning
		stderr string // a part of it
	}{
		{[]string{"--help"}, 0, "outboxd-bench measures", ""},
		{[]string{"help"}, 0, "outboxd-bench measures", ""},
		{[]string{"version"}, 0, "outboxd-bench dev (go", ""},
		{[]string{"--version"}, 0, "outboxd-bench dev (go", ""},
		{nil, 2, "", "outboxd-bench: no command given\nRun 'outboxd-bench --help' for usage."},
		{[]string{"run"}, 2, "", `unknown command "run"`},
		{[]string{"help", "run"}, 2, "", `unknown command "run"`},
		{[]string{"help", "bench", "demo"}, 2, "", "help: want one command"},
		{[]string{"version", "now"}, 2, "", `version: unexpected argument "now"`},
	}
	for _, c := range cases {
		code, out, errOut := outboxdBench(t, nil, c.args...)
		if code != c.code || !strings.HasPrefix(out, c.stdout) || !strings.Contains(errOut, c.stderr) || (c.stderr == "") != (errOut == "") {
			t.Errorf("outboxd-bench %s: exit %d, stdout %q, stderr %q; want exit %d, stdout starting %q, stderr with %q",
				strings.Join(c.args, " "), code, out, errOut, c.code, c.stdout, c.stderr)
		}
	}
}
