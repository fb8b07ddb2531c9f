package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/testenv"
)

func TestBenchQuickReportsEveryFigureAndNoMissingMessage(t *testing.T) {
	t.Parallel()
	bin := dispatcherWithFloor(t)
	// A stream of the user's in the environment must not reach the child dispatcher,
	// whose configuration would then be refused.
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t), "OUTBOXD_STREAMS__LEAK__DRIVER=nowhere"}
	code, out, errOut := outboxdBench(t, environ, "bench", "--quick", "--json", "--retained", "5000", "--dispatcher-binary", bin)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("bench --json wrote to stderr: %q", errOut)
	}

	// Every number is positive except the counts of what went wrong, every string set.
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("bench --json printed no JSON object: %v\n%s", err, out)
	}
	zeroIsRight := map[string]bool{"missing": true, "duplicates_at_broker": true}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		case []any:
			for _, e := range v {
				walk(path, e)
			}
		case float64:
			last := path[strings.LastIndex(path, ".")+1:]
			if zeroIsRight[last] {
				if v != 0 {
					t.Errorf("%s = %v, want 0", path, v)
				}
			} else if v <= 0 {
				t.Errorf("%s = %v, want a positive figure", path, v)
			}
		case string:
			if v == "" {
				t.Errorf("%s is empty", path)
			}
		}
	}
	walk("", raw)

	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Missing != 0 {
		t.Errorf("ok %v, missing %d", r.OK, r.Missing)
	}
	// The floors are timed before each idle start, and the start of outboxd, which does
	// more, is set against each.
	if f := r.ReadyMs; f.FloorDispatchingMs <= 0 || f.FloorReadyzMs < f.FloorDispatchingMs || f.FloorStarts < 1 ||
		f.DispatchingToFloor <= 0 || f.ReadyzToFloor <= 0 || f.FloorLinkedDispatchingMs <= 0 ||
		f.FloorLinkedReadyzMs < f.FloorLinkedDispatchingMs || f.FloorLinkedStarts < 1 || f.ReadyzToFloorLinked <= 0 {
		t.Errorf("ready_ms %+v: want both floors' medians (readyz after dispatching) over at least one start, and positive ratios", f)
	}
	if !slices.Equal(r.Settings.Drivers, bench.DefaultDriverTypes()) || len(r.Drivers) != len(bench.DefaultDriverTypes()) {
		t.Fatalf("measured drivers %v (report holds %d), want %v", r.Settings.Drivers, len(r.Drivers), bench.DefaultDriverTypes())
	}
	if r.Settings.BatchSizeFrom != "default" || r.Settings.Messages != 2000 {
		t.Errorf("settings %+v: want run's default batch size and --quick's 2000 messages", r.Settings)
	}
	if d := r.Drivers["discard"]; d != nil && d.Drain.CPURatioToDiscard != 1 {
		t.Errorf("discard: CPU-bound ratio to itself %v, want 1", d.Drain.CPURatioToDiscard)
	}
	for name, d := range r.Drivers {
		if d == nil {
			t.Fatalf("driver %s: no figures", name)
		}
		n := int64(r.Settings.Messages)
		if d.Drain.DeliveredInTable != n || d.Drain.ArrivedAtBroker != n {
			t.Errorf("%s: %d delivered in the table, %d arrived; want %d each", name, d.Drain.DeliveredInTable, d.Drain.ArrivedAtBroker, n)
		}
		if want := d.Drain.MsgsPerSec / r.SQLCeiling.MsgsPerSec; !near(d.Drain.RatioToSQLCeiling, want) {
			t.Errorf("%s: ratio to the SQL ceiling %v, want %v", name, d.Drain.RatioToSQLCeiling, want)
		}
		if want := d.Drain.MsgsPerSec / r.Drivers["discard"].Drain.MsgsPerSec; !near(d.Drain.RatioToDiscard, want) {
			t.Errorf("%s: ratio to discard %v, want %v", name, d.Drain.RatioToDiscard, want)
		}
		if d.LatencyIdle.Samples != r.Settings.IdleSamples || d.LatencyAtRate.Samples != int(float64(r.Settings.Rate)*r.Settings.LatencySeconds) {
			t.Errorf("%s: %d idle and %d offered-rate samples", name, d.LatencyIdle.Samples, d.LatencyAtRate.Samples)
		}
		if idle := d.Drain; idle.DispatcherIdleAnonMiB+idle.DispatcherIdleFileMiB > idle.DispatcherIdleRSSMiB+0.2 {
			t.Errorf("%s: idle RSS %.1f MiB is less than its anonymous %.1f and file %.1f MiB", name,
				idle.DispatcherIdleRSSMiB, idle.DispatcherIdleAnonMiB, idle.DispatcherIdleFileMiB)
		}
		// The server is on this machine: where the drain's CPU went is known.
		if dr := d.Drain; dr.DatabaseCPUSeconds == nil || dr.CPUBusy <= 0 || dr.CPUBusy > 1.5 || dr.CPURatioToDiscard <= 0 ||
			dr.CPUUsPerMsg < (*dr.DatabaseCPUSeconds+dr.BenchCPUSeconds)/float64(n)*1e6-0.1 {
			t.Errorf("%s: database CPU %v s, bench CPU %v s, busy %v, %v µs/msg, CPU-bound ÷ discard %v: want the database's "+
				"known, busy in (0, 1.5], µs/msg at least the database's and bench's share, a positive ratio", name,
				dr.DatabaseCPUSeconds, dr.BenchCPUSeconds, dr.CPUBusy, dr.CPUUsPerMsg, dr.CPURatioToDiscard)
		}
		// The embedded brokers and the http sink work in the bench's process, the
		// postgres destination in the database: only the first have a bound of their own.
		inBench := map[string]bool{"discard": true, "jetstream": true, "kafka": true, "nats": true, "http": true}
		if b := d.Drain.BrokerBoundRatioToDiscard; inBench[name] != (b > 0) || b > 1 {
			t.Errorf("%s: best ratio to discard with its broker %v; want one in (0, 1] exactly where the bench runs the destination", name, b)
		}
		if l := d.LatencyIdle; l.P50Ms > l.P90Ms || l.P90Ms > l.P99Ms || l.P99Ms > l.MaxMs {
			t.Errorf("%s: idle percentiles out of order: %+v", name, l)
		}
	}
}

// TestBenchAcknowledgingByDeleteDrainsWithDeletes runs the SQL ceiling and the drain with
// the DELETE write-back. A dispatcher that marked rows delivered instead would leave the
// backlog in the table, and the bench would count every message missing.
func TestBenchAcknowledgingByDeleteDrainsWithDeletes(t *testing.T) {
	t.Parallel()
	bin := dispatcher(t)
	dsn := testenv.EmptyDatabase(t)
	code, out, errOut := outboxdBench(t, []string{"OUTBOXD_DATABASE_URL=" + dsn}, "bench", "--quick", "--json", "--ack", "delete",
		"--drivers", "discard", "--dispatcher-binary", bin)
	if code != 0 {
		t.Fatalf("bench --ack delete: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json printed no JSON object: %v\n%s", err, out)
	}
	d := r.Drivers["discard"]
	if r.Settings.Ack != bench.AckDelete || d == nil || !r.OK || d.Drain.DeliveredInTable != int64(r.Settings.Messages) {
		t.Fatalf("settings.ack %q, ok %v, drain %+v; want delete, ok, every message delivered", r.Settings.Ack, r.OK, d)
	}
	var left int
	if err := testenv.Connect(t, dsn).QueryRow(t.Context(), "SELECT count(*) FROM "+bench.Table.Qualified()).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left in %s after the last phase (%v); acknowledging deletes every one", left, bench.Table, err)
	}
}

// TestBenchUsesTheBrokersItIsGivenAndLeavesNothingThere points the bench at brokers of
// "the user's": a Kafka cluster without the topic (the bench creates it) and a NATS
// server with JetStream (the bench's stream is gone afterwards).
func TestBenchUsesTheBrokersItIsGivenAndLeavesNothingThere(t *testing.T) {
	t.Parallel()
	bin := dispatcher(t)
	ns, kafka := testenv.NewNATS(t), testenv.NewKafka(t, 1)
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "bench", "--quick", "--json", "--dispatcher-binary", bin,
		"--drivers", "jetstream,kafka", "--nats-url", ns.URL(), "--kafka-brokers", kafka.Addr(), "--idle-samples", "3", "--rate", "50")
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Settings.NATS != ns.URL() || r.Settings.Kafka != kafka.Addr() || !r.OK {
		t.Fatalf("settings %+v, ok %v", r.Settings, r.OK)
	}
	for _, d := range []string{"jetstream", "kafka"} {
		if got := r.Drivers[d].Drain.ArrivedAtBroker; got != int64(r.Settings.Messages) {
			t.Errorf("%s: %d arrived, want %d", d, got, r.Settings.Messages)
		}
	}
	if _, ok := r.Drivers["discard"]; ok || r.Drivers["kafka"].Drain.RatioToDiscard != 0 {
		t.Errorf("discard was not asked for, yet reported: %+v", r.Drivers)
	}
	if n := ns.Server().GlobalAccount().JetStreamUsage().Streams; n != 0 {
		t.Errorf("the bench left %d JetStream stream(s) on the server", n)
	}
}

func near(got, want float64) bool { return got > want-0.001 && got < want+0.001 }

func TestBenchRefusesMistakesBeforeTouchingAnything(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"an unknown driver is named", []string{"--drivers", "discard,rabbit"}, 2, `unknown driver "rabbit"`},
		{"an empty backlog is refused", []string{"--messages", "0"}, 2, "--messages"},
		{"a stray argument is refused", []string{"now"}, 2, `unexpected argument "now"`},
		{"an unknown write-back is named", []string{"--ack", "drop"}, 2, `--ack: unknown write-back "drop"`},
		{"kept rows and acknowledging by DELETE exclude each other", []string{"--ack", "delete", "--retained", "10"}, 2, "--retained keeps delivered rows"},
		{"a batch size run would refuse is refused", []string{"--batch", "0"}, 1, "streams.bench_1.batch_size"},
		{"a missing dispatcher binary is named", []string{"--dispatcher-binary", "/nonexistent/outboxd"}, 1, "--dispatcher-binary"},
		{"the test binary is not taken for outboxd", nil, 1, "build outboxd and pass it with --dispatcher-binary"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := outboxdBench(t, []string{"OUTBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"},
				append([]string{"bench"}, c.args...)...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, errOut, c.code, c.want)
			}
		})
	}
}
