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

func TestTheBrokerBoundCountsOnlyWhatTheDestinationSpentInTheBenchsProcess(t *testing.T) {
	t.Parallel()
	drain := func(benchCPU, usPerMsg float64, inBench bool) *benchDriverReport {
		return &benchDriverReport{Drain: benchDrain{Messages: 100_000, BenchCPUSeconds: benchCPU, CPUUsPerMsg: usPerMsg, destInBench: inBench}}
	}
	discard := drain(0.1, 30, true)
	cases := []struct {
		name string
		d    *benchDriverReport
		want float64
	}{
		{"a broker that spent 1.5 s more than the discard drain's bench adds 15 µs a message", drain(1.6, 60, true), 30.0 / 45},
		{"a broker that spent less than the discard drain's bench adds nothing", drain(0.05, 35, true), 1},
		{"a destination outside the bench's process has no bound here", drain(0.1, 40, false), 0},
		{"a drain without CPU figures has no bound", drain(1.6, 0, true), 0},
	}
	for _, c := range cases {
		if got := brokerBound(discard, c.d); !near(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := brokerBound(nil, drain(1.6, 60, true)); got != 0 {
		t.Errorf("without a discard drain: %v, want 0", got)
	}
}
