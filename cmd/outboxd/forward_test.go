package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
)

// binaries holds outboxd and outboxd-bench built side by side, as make build lays them
// out, once for the tests of this file; TestMain removes the directory.
var binaries struct {
	once sync.Once
	dir  string
	ok   bool
}

func builtBinaries(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "outboxd-forward-")
		if err != nil {
			t.Fatal(err)
		}
		binaries.dir = dir
		testenv.GoBuild(t, ".", filepath.Join(dir, "outboxd"))
		testenv.GoBuild(t, "../outboxd-bench", filepath.Join(dir, "outboxd-bench"))
		binaries.ok = true
	})
	if !binaries.ok {
		t.Fatal("building outboxd and outboxd-bench failed: see the first test that asked")
	}
	return binaries.dir
}

// runBinary runs a built binary and returns its exit status and output.
func runBinary(t *testing.T, bin string, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s: %v", bin, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestOutboxdsBenchAndDemoAreAnsweredByTheOutboxdBenchBesideIt runs the verbs outboxd
// forwards: what comes back, help, a usage error's status 2, a failure's status 1, must
// be outboxd-bench's, also when outboxd is reached through a symbolic link.
func TestOutboxdsBenchAndDemoAreAnsweredByTheOutboxdBenchBesideIt(t *testing.T) {
	t.Parallel()
	dir := builtBinaries(t)
	link := filepath.Join(t.TempDir(), "outboxd")
	if err := os.Symlink(filepath.Join(dir, "outboxd"), link); err != nil {
		t.Fatal(err)
	}
	unreachable := []string{"OUTBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	cases := []struct {
		name    string
		bin     string
		environ []string
		args    []string
		code    int
		stdout  string // its beginning
		stderr  string // its beginning
	}{
		{"bench's help", filepath.Join(dir, "outboxd"), nil, []string{"bench", "--help"}, 0, "Usage: outboxd-bench bench", ""},
		{"demo's help through help", filepath.Join(dir, "outboxd"), nil, []string{"help", "demo"}, 0, "Usage: outboxd-bench demo", ""},
		{"a mistake in bench's flags", filepath.Join(dir, "outboxd"), nil, []string{"bench", "--no-such-flag"}, 2, "",
			"outboxd-bench: bench: flag provided but not defined: -no-such-flag\nRun 'outboxd-bench bench --help' for usage.\n"},
		{"a demo that fails", filepath.Join(dir, "outboxd"), unreachable, []string{"demo", "--messages", "10"}, 1, "", "outboxd-bench: demo: "},
		{"bench through a symbolic link to outboxd", link, nil, []string{"bench", "-h"}, 0, "Usage: outboxd-bench bench", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runBinary(t, c.bin, c.environ, c.args...)
			if code != c.code || !strings.HasPrefix(out, c.stdout) || !strings.HasPrefix(errOut, c.stderr) || (c.stderr == "") != (errOut == "") {
				t.Errorf("outboxd %s: exit %d, stdout %q, stderr %q; want exit %d, stdout starting %q, stderr starting %q",
					strings.Join(c.args, " "), code, out, errOut, c.code, c.stdout, c.stderr)
			}
		})
	}
}

// TestTheBenchForwarderNamesTheMissingSibling runs an outboxd with no outboxd-bench
// beside it, though one is on PATH: it must not run that one (another version could
// answer), and must say where it looked and how to build one.
func TestTheBenchForwarderNamesTheMissingSibling(t *testing.T) {
	t.Parallel()
	built := builtBinaries(t)
	alone := t.TempDir()
	bin := filepath.Join(alone, "outboxd")
	data, err := os.ReadFile(filepath.Join(built, "outboxd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	want := "looked for " + filepath.Join(alone, "outboxd-bench") + "): make build builds both, or: go build -o " +
		filepath.Join(alone, "outboxd-bench") + " ./cmd/outboxd-bench\n"
	for _, c := range []struct {
		verb string
		args []string
	}{{"bench", []string{"bench", "--quick"}}, {"demo", []string{"demo", "--messages", "10"}}, {"bench", []string{"help", "bench"}}} {
		// Were the verb run after all, it would fail at once on the unreachable database.
		environ := []string{"PATH=" + built, "OUTBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
		code, out, errOut := runBinary(t, bin, environ, c.args...)
		head := "outboxd: " + c.verb + " runs outboxd-bench, which is not beside this executable ("
		if code != 1 || out != "" || !strings.HasPrefix(errOut, head) || !strings.HasSuffix(errOut, want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("outboxd %s without outboxd-bench beside it: exit %d, stdout %q, stderr %q; want exit 1 and one line %q…%q",
				strings.Join(c.args, " "), code, out, errOut, head, want)
		}
	}
}

// TestOutboxdLinksNoneOfTheBenchsBrokers reads the modules linked into the binaries as
// go version -m does: outboxd, the binary deployments run, must carry neither the NATS
// server nor franz-go (kfake, kmsg); outboxd-bench carries both, which shows the check
// reads what it should.
func TestOutboxdLinksNoneOfTheBenchsBrokers(t *testing.T) {
	t.Parallel()
	dir := builtBinaries(t)
	brokers := []string{"github.com/nats-io/nats-server/", "github.com/twmb/franz-go"}
	for _, c := range []struct {
		bin  string
		want bool
	}{{"outboxd", false}, {"outboxd-bench", true}} {
		info, err := buildinfo.ReadFile(filepath.Join(dir, c.bin))
		if err != nil {
			t.Fatal(err)
		}
		for _, prefix := range brokers {
			var linked []string
			for _, m := range info.Deps {
				if strings.HasPrefix(m.Path, prefix) {
					linked = append(linked, m.Path)
				}
			}
			if (len(linked) > 0) != c.want {
				t.Errorf("%s links %q (modules %s…): want linked %v", c.bin, linked, prefix, c.want)
			}
		}
	}
}
