package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

var built struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// outboxdBinary builds cmd/outboxd, and both builds of cmd/outboxd-floor beside it, once for the tests
// of this file: the drains run it as their dispatcher process (inside `go test` this
// executable is the test binary).
func outboxdBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "outboxd-bench-test-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "outboxd")
		if built.out, built.err = testenv.Build("../../cmd/outboxd", built.bin); built.err != nil {
			return
		}
		// Beside it, as make build lays them out: the idle starts time the floors too.
		if built.out, built.err = testenv.Build("../../cmd/outboxd-floor", filepath.Join(dir, floorProgram)); built.err != nil {
			return
		}
		built.out, built.err = testenv.Build("../../cmd/outboxd-floor", filepath.Join(dir, floorLinkedProgram), "linked")
	})
	if built.err != nil {
		t.Fatalf("build outboxd for the drains' dispatcher (needs the go tool on PATH): %v\n%s", built.err, built.out)
	}
	return built.bin
}

// runBench runs the bench with --quick, --json and the flags of args, on a database of
// its own, and returns its report; a failed run fails the test.
func runBench(t *testing.T, args ...string) Report {
	t.Helper()
	o := DefaultOptions()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.Register(fs)
	if err := fs.Parse(append([]string{"--quick", "--json", "--dispatcher-binary", outboxdBinary(t)}, args...)); err != nil {
		t.Fatal(err)
	}
	o.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.Given[f.Name] = true })
	var out bytes.Buffer
	o.Environ = []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t), "PATH=" + os.Getenv("PATH")}
	o.Stdout, o.Stderr = &out, io.Discard
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Run(ctx, o); err != nil {
		t.Fatalf("bench %v: %v\n%s", args, err, out.String())
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out.String())
	}
	return r
}

func TestReplicasModeDrainsOneBacklogWithEveryReplicaCountAndCountsEachMessageOnce(t *testing.T) {
	t.Parallel()
	r := runBench(t, "--drivers", "discard", "--replicas", "1,3", "--messages", "3000")
	if got := len(r.Replicas); got != 2 {
		t.Fatalf("%d replica runs, want 2: %+v", got, r.Replicas)
	}
	for _, x := range r.Replicas {
		if x.Messages != 3000 || x.Missing != 0 || x.Duplicates != 0 || x.MsgsPerSec <= 0 {
			t.Errorf("%d replicas: %d messages, %d missing, %d duplicates, %v msg/s; want 3000, 0, 0 and a rate",
				x.Replicas, x.Messages, x.Missing, x.Duplicates, x.MsgsPerSec)
		}
		if x.PeakConnections < x.Replicas {
			t.Errorf("%d replicas: peak connections %d, want at least one a replica", x.Replicas, x.PeakConnections)
		}
		if x.DatabaseCPUSeconds == nil || *x.DatabaseCPUSeconds <= 0 {
			t.Errorf("%d replicas: database CPU %v, want a figure from the local server", x.Replicas, x.DatabaseCPUSeconds)
		}
	}
	if r.Replicas[0].RatioToOne != 1 || !near(r.Replicas[1].RatioToOne, r.Replicas[1].MsgsPerSec/r.Replicas[0].MsgsPerSec) {
		t.Errorf("ratios to one replica %v and %v", r.Replicas[0].RatioToOne, r.Replicas[1].RatioToOne)
	}
	// The database alone was measured per N too (claimAck fails unless it moved every
	// message of its backlog), and the ratios follow from the rates.
	for _, x := range r.Replicas {
		if x.SQLCeilingMsgsPerSec <= 0 || x.SQLCeilingDatabaseCPUSeconds == nil || *x.SQLCeilingDatabaseCPUSeconds <= 0 {
			t.Errorf("%d replicas: the database alone %v msg/s, its CPU %v; want a rate and a figure from the local server",
				x.Replicas, x.SQLCeilingMsgsPerSec, x.SQLCeilingDatabaseCPUSeconds)
		}
	}
	one, three := r.Replicas[0], r.Replicas[1]
	if one.SQLCeilingRatioToOne != 1 || one.RatioToSQLCeilingRatio != 1 ||
		!near(three.SQLCeilingRatioToOne, three.SQLCeilingMsgsPerSec/one.SQLCeilingMsgsPerSec) ||
		!near(three.RatioToSQLCeilingRatio, three.RatioToOne/three.SQLCeilingRatioToOne) {
		t.Errorf("the database alone's ratios: %+v and %+v", one, three)
	}
	// The database alone in as many processes: each moved its share of a backlog of
	// 3000 (databaseAloneProcesses fails the run when the shares do not add up), and its
	// ratios follow from its rates.
	for _, x := range r.Replicas {
		if x.ProcsMsgsPerSec <= 0 || x.ProcsCPUSeconds <= 0 || x.ProcsDatabaseCPUSeconds == nil || *x.ProcsDatabaseCPUSeconds <= 0 {
			t.Errorf("%d replicas: the database alone in processes %v msg/s, their CPU %v, the server's %v; want a rate and two figures",
				x.Replicas, x.ProcsMsgsPerSec, x.ProcsCPUSeconds, x.ProcsDatabaseCPUSeconds)
		}
	}
	if one.ProcsRatioToOne != 1 || one.RatioToProcsRatio != 1 ||
		!near(three.ProcsRatioToOne, three.ProcsMsgsPerSec/one.ProcsMsgsPerSec) ||
		!near(three.RatioToProcsRatio, three.RatioToOne/three.ProcsRatioToOne) {
		t.Errorf("the database alone in processes, ratios: %+v and %+v", one, three)
	}
	if !r.OK || r.Missing != 0 || len(r.Drivers) != 0 {
		t.Errorf("ok %v, missing %d, %d default drains (a scale mode runs alone)", r.OK, r.Missing, len(r.Drivers))
	}
}

func TestAClaimerProcessRunsOnlyWhenItsRoleIsSetAndSaysWhatItCouldNotRead(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	ran, err := runClaimer(t.Context(), []string{"OUTBOXD_DATABASE_URL=postgres://x"}, strings.NewReader(""), &out)
	if ran || err != nil || out.Len() != 0 {
		t.Errorf("without %s: ran %v, err %v, wrote %q; want nothing done", claimerRole, ran, err, out.String())
	}
	ran, err = runClaimer(t.Context(), []string{claimerRole + "={not json"}, strings.NewReader(""), &out)
	if !ran || err == nil || !strings.Contains(err.Error(), claimerRole) || out.Len() != 0 {
		t.Errorf("with a job it cannot read: ran %v, err %v, wrote %q; want an error naming %s", ran, err, out.String(), claimerRole)
	}
}

func TestClaimerProcessesMoveTheWholeBacklogTogetherAndEachOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	b := newTestBench(t)
	b.opt.set.Messages = 2000
	r, err := b.databaseAloneProcesses(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages != 2000 || r.MsgsPerSec <= 0 || r.claimersCPU <= 0 {
		t.Errorf("moved %d at %v msg/s, claimers' CPU %v; want 2000, a rate and a figure", r.Messages, r.MsgsPerSec, r.claimersCPU)
	}
	undelivered, err := b.store.BenchUndelivered(t.Context(), new(store.BenchBacklogMark))
	if err != nil || undelivered {
		t.Errorf("after the claimers: undelivered rows %v (%v), want none", undelivered, err)
	}
}

func TestABModeRunsBaselineAndCurrentAlternatelyAndReportsTheirRatios(t *testing.T) {
	t.Parallel()
	// Both sides are the same build behind scripts that note each drain's side.
	dir := t.TempDir()
	sides := filepath.Join(dir, "sides")
	wrap := func(name, side string) string {
		path := filepath.Join(dir, name)
		script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = run ] && echo %s >> %q\nexec %q \"$@\"\n", side, sides, outboxdBinary(t))
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	baseline, current := wrap("outboxd-base", "A"), wrap("outboxd-current", "B")
	for _, floor := range []string{floorProgram, floorLinkedProgram} { // found beside the current binary
		if err := os.Symlink(filepath.Join(filepath.Dir(outboxdBinary(t)), floor), filepath.Join(dir, floor)); err != nil {
			t.Fatal(err)
		}
	}
	r := runBench(t, "--drivers", "discard", "--baseline-binary", baseline, "--dispatcher-binary", current,
		"--rounds", "3", "--messages", "1000", "--idle-samples", "5", "--latency-duration", "200ms")
	ran, err := os.ReadFile(sides)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds A B, B A, A B make the sides' runs A, B B, A A, B (a drain may start its
	// binary more than once, and the latency phase after the drains runs B again); rounds
	// A B, A B, A B would alternate six times.
	got := slices.Compact(strings.Fields(string(ran)))
	if !slices.Equal(got, []string{"A", "B", "A", "B"}) {
		t.Errorf("the sides ran in the runs %v (all: %q); want A, B, A, B: each round after the first starts with the side that ended the one before", got, ran)
	}
	if r.AB == nil || r.AB.Drivers["discard"] == nil {
		t.Fatalf("no A/B figures: %+v", r.AB)
	}
	x := r.AB.Drivers["discard"]
	if len(x.A.RunsMsgsPerSec) != 3 || len(x.B.RunsMsgsPerSec) != 3 {
		t.Fatalf("runs A %v, B %v; want three each", x.A.RunsMsgsPerSec, x.B.RunsMsgsPerSec)
	}
	if !near(x.Ratio.MsgsPerSec, x.B.MsgsPerSec/x.A.MsgsPerSec) || !near(x.Ratio.DispatcherCPUSeconds, x.B.DispatcherCPUSeconds/x.A.DispatcherCPUSeconds) {
		t.Errorf("ratios %+v do not match medians A %+v, B %+v", x.Ratio, x.A, x.B)
	}
	if len(x.Ratio.RunsMsgsPerSec) != 3 || !near(x.Ratio.RunsMsgsPerSec[1], x.B.RunsMsgsPerSec[1]/x.A.RunsMsgsPerSec[1]) {
		t.Errorf("per-round ratios %v from A %v and B %v", x.Ratio.RunsMsgsPerSec, x.A.RunsMsgsPerSec, x.B.RunsMsgsPerSec)
	}
	if x.A.DispatcherIdleRSSMiB <= 0 || x.B.DispatcherIdleRSSMiB <= 0 || !near(x.Ratio.DispatcherIdleRSSMiB, x.B.DispatcherIdleRSSMiB/x.A.DispatcherIdleRSSMiB) ||
		x.A.ReadyDispatchingMs <= 0 || !near(x.Ratio.ReadyzMs, x.B.ReadyzMs/x.A.ReadyzMs) {
		t.Errorf("idle RSS and start figures %+v from A %+v and B %+v", x.Ratio, x.A, x.B)
	}
	if f := r.ReadyMs; f.Drains != 6 || f.ReadyzMs <= 0 || f.DispatchingMs <= 0 || f.FloorStarts != 6 || f.FloorReadyzMs <= 0 ||
		f.FloorLinkedStarts != 6 || f.FloorLinkedReadyzMs <= 0 {
		t.Errorf("ready_ms %+v, want the medians of 6 drains and of both floors started before each", r.ReadyMs)
	}
	if !slices.Contains(x.B.RunsMsgsPerSec, r.Drivers["discard"].Drain.MsgsPerSec) {
		t.Errorf("the driver's drain (%v msg/s) is not one of the current binary's runs %v", r.Drivers["discard"].Drain.MsgsPerSec, x.B.RunsMsgsPerSec)
	}
}

func TestManyStreamsModeMeasuresTheIdleDispatcherAndTheBusyStreamsLatency(t *testing.T) {
	t.Parallel()
	r := runBench(t, "--drivers", "discard", "--many-streams", "5", "--idle-window", "300ms", "--rate", "100", "--latency-duration", "500ms")
	m := r.ManyStreams
	if m == nil || len(m.Runs) != 1 {
		t.Fatalf("many streams: %+v", m)
	}
	run := m.Runs[0]
	if run.Streams != 5 || run.IdleConnections < 1 || run.IdleCPUPercent < 0 || run.IdleTransactionsPerSec < 0 || run.ReadyzMs <= 0 {
		t.Errorf("idle figures %+v", run)
	}
	if m.BusyAlone.Samples != 50 || run.Busy.Samples != 50 {
		t.Errorf("%d and %d busy samples, want 50 each (100 msg/s for 500ms)", m.BusyAlone.Samples, run.Busy.Samples)
	}
	if !near(run.RatioP50, run.Busy.P50Ms/m.BusyAlone.P50Ms) || !near(run.RatioP99, run.Busy.P99Ms/m.BusyAlone.P99Ms) {
		t.Errorf("ratios %v, %v against p50 %v/%v, p99 %v/%v", run.RatioP50, run.RatioP99, run.Busy.P50Ms, m.BusyAlone.P50Ms,
			run.Busy.P99Ms, m.BusyAlone.P99Ms)
	}
}

func TestPayloadsModeDrainsEachSizeAndCountsMegabytes(t *testing.T) {
	t.Parallel()
	r := runBench(t, "--drivers", "discard", "--payloads", "64KiB,256KiB", "--messages", "40")
	if len(r.Payloads) != 2 {
		t.Fatalf("payload runs %+v", r.Payloads)
	}
	for i, size := range []int{64 << 10, 256 << 10} {
		x := r.Payloads[i]
		if x.PayloadBytes != size || x.Messages != 40 || x.Failed != 0 || x.Missing != 0 || x.PeakRSSMiB <= 0 {
			t.Errorf("payload %d: %+v", size, x)
		}
		// msgs_per_sec is rounded to 0.1 before mb_per_sec is taken from it.
		if want := x.MsgsPerSec * float64(size) / 1e6; x.MBPerSec < want-0.01 || x.MBPerSec > want+0.01 {
			t.Errorf("payload %d: %v MB/s at %v msg/s", size, x.MBPerSec, x.MsgsPerSec)
		}
	}
}

func TestBacklogModeMeasuresTheFirstMessagesOfALargeAndASmallBacklogAndTheirSQLCeilings(t *testing.T) {
	t.Parallel()
	r := runBench(t, "--drivers", "discard", "--backlog", "6000", "--backlog-sample", "500", "--messages", "1000")
	bl := r.Backlog
	if bl == nil {
		t.Fatal("no backlog figures")
	}
	for _, x := range []benchBacklogRun{bl.Small, bl.Large} {
		if x.Measured < 500 || x.MsgsPerSec <= 0 || x.FirstOutMs <= 0 || x.Missing != 0 {
			t.Errorf("backlog of %d: %+v", x.Pending, x)
		}
		if x.SQLCeilingMsgsPerSec <= 0 || !near(x.RatioToSQLCeiling, x.MsgsPerSec/x.SQLCeilingMsgsPerSec) {
			t.Errorf("backlog of %d: SQL ceiling %v msg/s, drain ÷ it %v", x.Pending, x.SQLCeilingMsgsPerSec, x.RatioToSQLCeiling)
		}
	}
	if bl.Small.Pending != 1000 || bl.Large.Pending != 6000 || !near(bl.RatioToSmall, bl.Large.MsgsPerSec/bl.Small.MsgsPerSec) {
		t.Errorf("backlog %+v", bl)
	}
	if bl.SQLCeilingRatioToSmall <= 0 || !near(bl.SQLCeilingRatioToSmall, bl.Large.SQLCeilingMsgsPerSec/bl.Small.SQLCeilingMsgsPerSec) {
		t.Errorf("SQL ceiling large ÷ small %v of %+v", bl.SQLCeilingRatioToSmall, bl)
	}
}

func TestScaleModeListsAreReadAsCountsAndSizes(t *testing.T) {
	t.Parallel()
	const counts, sizes = 1, 0
	for _, c := range []struct {
		name, list string
		unit, hi   int
		want       []int
		bad        bool
	}{
		{"an empty list asks for nothing", "", counts, 16, nil, false},
		{"counts are plain numbers", "1, 2,4", counts, 16, []int{1, 2, 4}, false},
		{"sizes take KiB and MiB", "64KiB,1MiB,100B,7", sizes, 16 << 20, []int{64 << 10, 1 << 20, 100, 7}, false},
		{"a count with a unit is refused", "2KiB", counts, 16, nil, true},
		{"a value above the bound is refused", "17", counts, 16, nil, true},
		{"a size above the bound is refused", "17MiB", sizes, 16 << 20, nil, true},
		{"zero is refused", "0", counts, 16, nil, true},
	} {
		got, err := intList("x", c.list, 1, c.hi, c.unit)
		if (err != nil) != c.bad || !slices.Equal(got, c.want) {
			t.Errorf("%s: %q gave %v, %v", c.name, c.list, got, err)
		}
	}
}

// TestDocsListEveryBenchFlagAndNoOther holds the Flags table of docs/benchmarks.md to
// the flags Register declares.
func TestDocsListEveryBenchFlagAndNoOther(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(benchDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Flags\n")
	if !ok {
		t.Fatalf("%s has no section \"## Flags\"", benchDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `--"); ok {
			name, _, _ := strings.Cut(rest, "`")
			documented[name] = true
		}
	}
	o := DefaultOptions()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.Register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !documented[f.Name] {
			t.Errorf("%s does not document --%s", benchDoc, f.Name)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("%s documents --%s, which bench does not have", benchDoc, name)
	}
}

func near(got, want float64) bool { return got > want-0.001 && got < want+0.001 }

func TestScaleModeOptionsThatCannotRunAreRefusedBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"an A/B run does not combine with a scale mode", []string{"--baseline-binary", "/bin/true", "--replicas", "1,2"}},
		{"the drains' limits are not measured beside a scale mode", []string{"--alone", "--payloads", "64KiB"}},
		{"an A/B run needs a round", []string{"--baseline-binary", "/bin/true", "--rounds", "0"}},
		{"more than 16 replicas are refused", []string{"--replicas", "1,17"}},
		{"many streams need more than the busy ones", []string{"--many-streams", "2"}},
		{"a payload above 16 MiB is refused", []string{"--payloads", "17MiB"}},
		{"a negative backlog is refused", []string{"--backlog", "-1"}},
		{"an idle window under 100ms is refused", []string{"--many-streams", "10", "--idle-window", "10ms"}},
	} {
		o := DefaultOptions()
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		o.Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		_, err := resolve(o)
		var optErr OptionError
		if !errors.As(err, &optErr) {
			t.Errorf("%s: %v gave %v, want an OptionError", c.name, c.args, err)
		}
	}
}

func TestReplicaSessionsThatCannotOpenReturnOnlyTheError(t *testing.T) {
	t.Parallel()
	b := &bench{}
	b.opt.dsn = "postgres://postgres@127.0.0.1:1/none?connect_timeout=2&sslmode=disable"
	b.opt.set.Streams, b.opt.set.Concurrency = 1, 2
	stores, closeStores, err := b.replicaStores(t.Context(), 3)
	if err == nil {
		closeStores()
		t.Fatalf("%d stores on a database nobody listens for, want an error", len(stores))
	}
	if stores != nil || closeStores != nil {
		t.Errorf("a failure returned stores %v and a close function; the caller would use them", stores)
	}
}
