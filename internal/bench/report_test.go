package bench

import (
	"bytes"
	"testing"
)

// TestBenchProgressOffATerminalIsOneLinePerFinishedPhase holds the bench to what
// docs/benchmarks.md says of stderr that is not a terminal (a pipe, a file, CI): no line
// rewritten in place, only one plain line per finished phase, however long it runs.
func TestBenchProgressOffATerminalIsOneLinePerFinishedPhase(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	p := newProgress(&stderr, true)
	p.begin("SQL ceiling", 100, func() int64 { return 50 })
	p.end("1,000 msg/s")
	p.begin("latency jetstream: idle", 10, func() int64 { return 10 })
	p.stop()
	p.begin("drain jetstream", 10, func() int64 { return 10 })
	p.end("900 msg/s")
	if want := "SQL ceiling: 1,000 msg/s\ndrain jetstream: 900 msg/s\n"; stderr.String() != want {
		t.Errorf("progress wrote %q; want %q", stderr.String(), want)
	}
	if p.animate {
		t.Errorf("a bytes.Buffer was taken for a terminal")
	}
}
