package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/demo"
	"github.com/outboxd/outboxd/internal/testenv"
)

func TestDemoDeliversEveryCommittedMessageAndNoRolledBackOne(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "demo", "--messages", "3000", "--producers", "4", "--batch", "25", "--json")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var s demo.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("demo --json printed %q: %v", out, err)
	}
	// 3000 messages in 120 transactions of 25; every tenth transaction rolls back.
	if s.Produced != 3000 || s.RolledBack != 300 || s.Committed != 2700 || s.Delivered != 2700 || s.Lost != 0 || s.Phantoms != 0 {
		t.Fatalf("summary: %+v", s)
	}
	if s.MsgsPerSec <= 0 || s.LatencyP50Ms <= 0 || s.LatencyP99Ms < s.LatencyP50Ms {
		t.Fatalf("summary lacks measurements: %+v", s)
	}
	// The peak resident set is the process's own (getrusage), where the system tells it.
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if rss, ok := raw["peak_rss_mib"].(float64); runtime.GOOS == "linux" && (!ok || rss < 1) {
		t.Errorf("summary's peak_rss_mib is %v; want the process's peak resident set in MiB: %s", raw["peak_rss_mib"], out)
	}
	// The human form names the same figures and the query to inspect the table.
	code, out, _ = outboxdBench(t, environ, "demo", "--messages", "500")
	if code != 0 || !strings.Contains(out, "lost          0") || !strings.Contains(out, "outboxd_demo.messages_stats") ||
		(runtime.GOOS == "linux" && !strings.Contains(out, "peak RSS")) {
		t.Fatalf("demo summary: exit %d\n%s", code, out)
	}
}

func TestDemoRefusesNonsenseFlags(t *testing.T) {
	t.Parallel()
	code, _, errOut := outboxdBench(t, nil, "demo", "--messages", "0")
	if code != 2 || !strings.Contains(errOut, "--messages must be at least 1") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, _, errOut = outboxdBench(t, nil, "demo", "--lose-answer-every", "-1")
	if code != 2 || !strings.Contains(errOut, "--lose-answer-every at least 0") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// TestDemoCountsTheCopiesTheDispatcherPublishedAgain loses the broker's answer to some
// batches, so the dispatcher publishes them again: the stream's de-duplication keeps
// one copy of each, and the demo must still count the copies sent, as the duplicates a
// consumer without de-duplication would see.
func TestDemoCountsTheCopiesTheDispatcherPublishedAgain(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "demo", "--messages", "1000", "--producers", "2", "--batch", "50",
		"--rollback-every", "0", "--lose-answer-every", "2", "--json")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var s demo.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("demo --json printed %q: %v", out, err)
	}
	if s.Committed != 1000 || s.Delivered != 1000 || s.Lost != 0 || s.Phantoms != 0 {
		t.Fatalf("summary: %+v", s)
	}
	// Every second batch's answer was lost, each message's at most once: some hundreds
	// of messages were published twice.
	if s.Duplicates == 0 || s.Duplicates > s.Delivered {
		t.Errorf("duplicates %d; want the copies published again after their answer was lost (between 1 and %d)", s.Duplicates, s.Delivered)
	}
}

// TestDemoShowsProgressOnlyOnATerminal runs the demo with stderr a pipe, as under CI
// or `2>log`: the in-place progress line (carriage returns, erase-line escapes) is for
// a terminal only, and nothing replaces it there, so stderr stays empty.
func TestDemoShowsProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "demo", "--messages", "2000", "--producers", "2")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout %s\nstderr %q", code, out, errOut)
	}
	if !strings.Contains(out, "delivered     1800") {
		t.Errorf("stdout lacks the summary:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("stderr is not a terminal, yet the demo wrote to it: %q", errOut)
	}
}

// TestMakeDemoJSONPrintsOnlyTheSummaryOnStdout runs what the README shows, `make demo
// ARGS='… --json'`, through make and scripts/demo.sh: stdout must hold exactly one JSON
// object, so it can be piped to jq; make's command echo and the scripts' setup chatter
// belong on stderr.
func TestMakeDemoJSONPrintsOnlyTheSummaryOnStdout(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"make", "bash", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("this test runs make demo and needs %s on PATH: %v", tool, err)
		}
	}
	// ensure-postgres.sh takes OUTBOXD_TEST_DATABASE_URL when it answers (and says so on
	// stderr); an empty database keeps the demo's schema away from other tests.
	environ := []string{"OUTBOXD_TEST_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "OUTBOXD_"), name == "MAKEFLAGS", name == "MFLAGS", name == "MAKELEVEL":
			// make run from make (make test) would print "Entering directory" lines.
			continue
		}
		environ = append(environ, kv)
	}
	cmd := exec.Command("make", "demo", "ARGS=--messages 2000 --producers 2 --json")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = environ
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make demo: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
	var s demo.Summary
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("make demo --json: stdout is not a JSON object: %v\n%q", err, stdout.String())
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" || dec.More() {
		t.Fatalf("make demo --json: stdout holds more than the summary: %q", stdout.String())
	}
	if s.Committed != 1800 || s.Delivered != 1800 || s.Lost != 0 {
		t.Errorf("summary: %+v", s)
	}
	if strings.Contains(stderr.String(), "\r") || strings.Contains(stderr.String(), "delivered ") {
		t.Errorf("make demo --json: progress on stderr: %q", stderr.String())
	}
}

// TestTheDemoCountsEveryMessageAtARedisStream points the demo at the machine's Redis:
// every committed message arrives in the stream, read back by its message_id field.
func TestTheDemoCountsEveryMessageAtARedisStream(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "demo", "--driver", "redis", "--redis-addr", addr,
		"--messages", "2000", "--producers", "2", "--lose-answer-every", "2", "--timeout", "1m", "--json")
	if code != 0 {
		t.Fatalf("demo --driver redis: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var s demo.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("demo --json printed %q: %v", out, err)
	}
	if s.Committed != 1800 || s.Delivered != 1800 || s.Lost != 0 || s.Phantoms != 0 {
		t.Fatalf("summary: %+v", s)
	}
	// A Redis stream keeps every copy: the batches whose answer was lost arrive twice.
	// Every second batch, not every fifth: the demo's batches hold up to 500 messages, so
	// a fast run can publish its 1,800 in four and never reach a fifth.
	if s.Duplicates == 0 {
		t.Errorf("no duplicates counted, though every second batch's answer was lost: %+v", s)
	}
}

// TestDemoIntoAPostgresInboxLosesNothingAndCountsTheCopiesItsKeyAbsorbed points the demo
// at a postgres inbox and loses some answers: the dispatcher publishes those batches
// again, the inbox's primary key keeps one row of each message, and the demo counts
// the copies the driver saw absorbed.
func TestDemoIntoAPostgresInboxLosesNothingAndCountsTheCopiesItsKeyAbsorbed(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "demo", "--driver", "postgres", "--messages", "1000", "--producers", "2",
		"--batch", "50", "--lose-answer-every", "2", "--json")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var s demo.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("demo --json printed %q: %v", out, err)
	}
	if s.Committed != 900 || s.Delivered != 900 || s.Lost != 0 || s.Phantoms != 0 {
		t.Fatalf("summary: %+v", s)
	}
	if s.Duplicates == 0 || s.Duplicates > s.Delivered {
		t.Errorf("duplicates %d; want the copies the inbox absorbed (between 1 and %d)", s.Duplicates, s.Delivered)
	}
}
