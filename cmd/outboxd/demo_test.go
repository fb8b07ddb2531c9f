package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestDemoDeliversEveryCommittedMessageAndNoRolledBackOne(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxd(t, environ, "demo", "--messages", "3000", "--producers", "4", "--batch", "25", "--json")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var s demoSummary
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
	// The human form names the same figures and the query to inspect the table.
	code, out, _ = outboxd(t, environ, "demo", "--messages", "500")
	if code != 0 || !strings.Contains(out, "lost          0") || !strings.Contains(out, "outboxd_demo.messages_stats") {
		t.Fatalf("demo summary: exit %d\n%s", code, out)
	}
}

func TestDemoRefusesNonsenseFlags(t *testing.T) {
	t.Parallel()
	code, _, errOut := outboxd(t, nil, "demo", "--messages", "0")
	if code != 2 || !strings.Contains(errOut, "--messages must be at least 1") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
