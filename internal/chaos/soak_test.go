//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// soakForm is the timing the soak runs with: outages long enough to matter, short
// enough that every fault comes round several times in half an hour.
var soakForm = form{
	name: "soak", outage: 10 * time.Second,
	leaseTTL: 5 * time.Second, publishTimeout: 2 * time.Second, pollInterval: 500 * time.Millisecond,
	backoffInitial: 100 * time.Millisecond, backoffMax: 2 * time.Second, janitorInterval: time.Second,
	txSize: 20, producers: 3, drainTimeout: 5 * time.Minute,
}

const (
	soakRate        = 200.0            // messages per second, all producers together
	soakCycle       = time.Minute      // one fault per cycle: fault, recovery, calm
	soakSample      = 10 * time.Second // how often each replica is sampled
	soakRSSGrowth   = 0.25             // last-third median RSS over first-third median, at most
	soakGoroutines  = 25               // last-third median goroutines over first-third median, at most
	soakMinSamples  = 9                // fewer after warm-up: too short a life to judge
	soakWarmupShare = 0.1              // of the soak (at least a minute) ignored as warm-up
)

// sample is one look at a replica.
type sample struct {
	at         time.Duration // since the soak began
	rss        int64
	goroutines int
}

// TestSoak runs load with the faults in rotation for $OUTBOXD_TEST_SOAK (make soak),
// sampling each replica's RSS and goroutines every 10 s; both must stay flat, and every
// message committed during the soak must arrive.
func TestSoak(t *testing.T) {
	raw := os.Getenv(envSoak)
	if raw == "" {
		t.Skipf("the soak runs with %s set to a duration (make soak DURATION=30m)", envSoak)
	}
	duration, err := time.ParseDuration(raw)
	if err != nil || duration < 2*time.Minute {
		t.Fatalf("%s=%q: want a duration of at least 2m", envSoak, raw)
	}
	f := soakForm
	f.messages = int(soakRate * duration.Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), duration+30*time.Minute)
	defer cancel()
	sc := scenario{name: "soak", ownServer: true, tune: func(s *settings) { s.deadLetterEvery = 200 }}
	w := newWorld(t, ctx, f, &sc)
	monCtx, stopMonitor := context.WithCancel(ctx)
	monitored := make(chan struct{})
	go func() { defer close(monitored); w.monitor(monCtx) }()
	defer func() { stopMonitor(); <-monitored }()

	w.startReplicas()
	began := time.Now()
	prod := w.startProducers(f.messages, soakRate)
	prod.endFault() // the soak's load runs to its end, whatever the faults
	defer prod.stop()

	series := map[string][]sample{} // by process id
	sampled := make(chan struct{})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(soakSample)
		defer tick.Stop()
		for {
			for _, r := range w.live() {
				s, err := sampleReplica(sampleCtx, r, time.Since(began))
				if err == nil {
					series[r.id] = append(series[r.id], s)
				}
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	faults := soakFaults()
	var log []string
	for i := 0; time.Since(began)+soakCycle <= duration; i++ {
		cycle := time.Now()
		fl := faults[i%len(faults)]
		w.mu.Lock()
		w.faultEnd = time.Time{}
		w.mu.Unlock()
		w.markFaultStart()
		if err := fl.fault(w); err != nil {
			t.Fatalf("soak: fault %s (cycle %d): %v", fl.name, i+1, err)
		}
		w.markFaultEnd()
		faultTook := time.Since(cycle)
		err := w.await("the backlog to drain after "+fl.name, f.drainTimeout, func() (bool, error) {
			n, err := w.backlog(ctx)
			return err == nil && n < int64(soakRate), nil // producers keep writing: "drained" is less than a second's worth
		})
		if err != nil {
			t.Fatalf("soak: %v", err)
		}
		line := fmt.Sprintf("soak: %6s cycle %2d %-28s fault %6s, recovered %6s", time.Since(began).Round(time.Second), i+1, fl.name,
			faultTook.Round(100*time.Millisecond), time.Since(w.faultEnd).Round(100*time.Millisecond))
		log = append(log, line)
		fmt.Fprintln(os.Stderr, line)
		if rest := soakCycle - time.Since(cycle); rest > 0 {
			must(t, w.hold(rest))
		}
	}
	if rest := duration - time.Since(began); rest > 0 { // calm to the end
		must(t, w.hold(rest))
	}
	stopSampling()
	<-sampled

	// Every message committed during the soak must have arrived.
	prod.stop()
	must(t, w.ledger.resolve(ctx, w))
	committed := w.ledger.snapshot()
	if _, err := w.waitDrained(committed); err != nil {
		t.Fatal(err)
	}
	must(t, w.scrapeAll())
	arrivals, err := w.collect(ctx)
	must(t, err)
	o := outcome{Scenario: "soak"}
	verdict := judge(arrivals, committed, []check{newAtLeastOnce(committed, w.ledger)}, &o)
	o.Conflicts = int(w.total("outboxd_lease_conflicts_total"))
	w.mu.Lock()
	for _, e := range w.errs {
		verdict = joinErr(verdict, e)
	}
	w.mu.Unlock()

	report, flat := soakReport(series, duration, log, o)
	for _, id := range sortedKeys(series) {
		var b strings.Builder
		for _, x := range series[id] {
			fmt.Fprintf(&b, "\n  %8s  RSS %6.1f MiB  goroutines %4d", x.at.Round(time.Second), float64(x.rss)/(1<<20), x.goroutines)
		}
		t.Logf("soak: every sample of %s:%s", id, b.String())
	}
	t.Logf("\n%s", report)
	if path := os.Getenv(envReport); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		}
	}
	if verdict != nil {
		t.Error(verdict)
	}
	if !flat {
		t.Error("soak: a replica's RSS or goroutines grew beyond the thresholds (see the report)")
	}
}

// soakFault is one fault of the rotation.
type soakFault struct {
	name  string
	fault func(w *world) error
}

// soakFaults are the scenarios' faults that can repeat on a running system of
// unordered streams, and a storage limit set at the stream's current size (the
// scenario's fixed limit would be reached once only).
func soakFaults() []soakFault {
	var out []soakFault
	for _, sc := range scenarios() {
		var s settings
		if sc.tune != nil {
			sc.tune(&s)
		}
		if s.ordered { // the soak's streams are not ordered
			continue
		}
		if s.proxyPerReplica { // the soak's replicas share one database proxy
			continue
		}
		switch sc.name {
		case "migrate-race": // needs an empty database
		case "jetstream-full":
			out = append(out, soakFault{name: sc.name, fault: fillJetStream})
		default:
			out = append(out, soakFault{name: sc.name, fault: sc.fault})
		}
	}
	return out
}

// fillJetStream limits SHIPMENTS to what it holds now (discard new), so it refuses
// writes for the outage, then lifts the limit.
func fillJetStream(w *world) error {
	nc, err := natsgo.Connect(w.js.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(w.ctx, jsStream)
	if err != nil {
		return err
	}
	info, err := s.Info(w.ctx)
	if err != nil {
		return err
	}
	cfg := info.Config
	cfg.MaxBytes, cfg.Discard = int64(info.State.Bytes)+1024, jetstream.DiscardNew
	if _, err := js.UpdateStream(w.ctx, cfg); err != nil {
		return err
	}
	w.markFaultStart()
	if err := w.hold(w.f.outage); err != nil {
		return err
	}
	cfg.MaxBytes = -1
	_, err = js.UpdateStream(w.ctx, cfg)
	return err
}

func sampleReplica(ctx context.Context, r *replica, at time.Duration) (sample, error) {
	rss, err := r.rss()
	if err != nil {
		return sample{}, err
	}
	m, err := r.scrape(ctx)
	if err != nil {
		return sample{}, err
	}
	return sample{at: at, rss: rss, goroutines: int(m.sum("go_goroutines"))}, nil
}

// soakReport renders the samples, per process, and judges each process that lived
// long enough: after its warm-up, the median of its last third must not exceed the
// median of its first third by more than the thresholds.
func soakReport(series map[string][]sample, duration time.Duration, log []string, o outcome) (string, bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %s, %d messages committed, %d delivered, %d lost, %d duplicates, %d lease conflicts\n\n",
		duration, o.Committed, o.Delivered, o.Lost, o.Duplicates, o.Conflicts)
	warmup := max(time.Minute, time.Duration(soakWarmupShare*float64(duration)))
	b.WriteString("| process | samples | RSS MiB, first third | RSS MiB, last third | growth | goroutines, first third | goroutines, last third | verdict |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|\n")
	ids := sortedKeys(series)
	flat := true
	for _, id := range ids {
		s := series[id]
		var judged []sample
		for _, x := range s {
			if x.at-s[0].at >= warmup {
				judged = append(judged, x)
			}
		}
		if len(judged) < soakMinSamples {
			fmt.Fprintf(&b, "| %s | %d | – | – | – | – | – | lived too short to judge |\n", id, len(s))
			continue
		}
		third := len(judged) / 3
		first, last := judged[:third], judged[len(judged)-third:]
		rss0, rss1 := median(first, func(x sample) float64 { return float64(x.rss) }), median(last, func(x sample) float64 { return float64(x.rss) })
		g0, g1 := median(first, func(x sample) float64 { return float64(x.goroutines) }), median(last, func(x sample) float64 { return float64(x.goroutines) })
		growth := rss1/rss0 - 1
		verdict := "flat"
		if growth > soakRSSGrowth || g1-g0 > soakGoroutines {
			verdict, flat = "GROWS", false
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %+.1f%% | %.0f | %.0f | %s |\n", id, len(s), rss0/(1<<20), rss1/(1<<20),
			100*growth, g0, g1, verdict)
	}
	fmt.Fprintf(&b, "\nthresholds: after a warm-up of %s, RSS may grow at most %.0f%% and goroutines by at most %d (medians of the last third over the first)\n\n",
		warmup, 100*soakRSSGrowth, soakGoroutines)
	b.WriteString("faults, in rotation:\n")
	for _, l := range log {
		b.WriteString("  " + strings.TrimPrefix(l, "soak: ") + "\n")
	}
	b.WriteString("\nseries, one sample a minute (time: RSS MiB / goroutines):\n")
	for _, id := range ids {
		var parts []string
		next := time.Duration(0)
		for _, x := range series[id] {
			if x.at >= next {
				parts = append(parts, fmt.Sprintf("%s: %.1f/%d", x.at.Round(time.Second), float64(x.rss)/(1<<20), x.goroutines))
				next = x.at + time.Minute
			}
		}
		fmt.Fprintf(&b, "  %s  %s\n", id, strings.Join(parts, "  "))
	}
	return b.String(), flat
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func median(s []sample, v func(sample) float64) float64 {
	vals := make([]float64, len(s))
	for i, x := range s {
		vals[i] = v(x)
	}
	sort.Float64s(vals)
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}
