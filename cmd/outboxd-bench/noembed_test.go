package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestABuildWithoutTheEmbeddedBrokersRefusesTheDemoSayingWhy builds outboxd-bench with
// the noembed tag (internal/bench's doc) and runs the demo, which needs the embedded NATS
// server: it must fail at once with the reason and the way out, not start half a demo.
func TestABuildWithoutTheEmbeddedBrokersRefusesTheDemoSayingWhy(t *testing.T) {
	t.Parallel()
	bin := testenv.GoBuild(t, ".", filepath.Join(t.TempDir(), "outboxd-bench"), "noembed")
	cmd := exec.Command(bin, "demo", "--messages", "10")
	cmd.Env = []string{"OUTBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/none"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("demo in a noembed build: %v, want exit status 1\nstderr: %s", err, stderr.String())
	}
	for _, want := range []string{"built with -tags noembed", "make demo builds one"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("demo in a noembed build said %q, want it to contain %q", stderr.String(), want)
		}
	}
}
