//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// scenario is one fault, declared: what it is, how the world is adjusted for it, the
// fault itself, and what it must have caused. runScenario does everything else the
// same way for every scenario: services, replicas, producers, the drain and the
// at-least-once verdict.
type scenario struct {
	name  string
	about string // one line, for the log and docs/chaos.md
	// ownServer: the scenario restarts PostgreSQL, so it gets a private server of its
	// own (skipped, saying why, where none can be started).
	ownServer bool
	// emptyDB: no schema; the fault starts the replicas itself (with --migrate).
	emptyDB bool
	tune    func(s *settings)
	// fault runs while the producers commit, starting when a quarter of the messages
	// are written. It calls w.markFaultStart (else its start counts) and
	// w.markFaultEnd when the fault is over (else its return counts).
	fault func(w *world) error
	// expect runs after the drain and the final scrape: the fault must have been
	// felt (or the scenario proved nothing) and caused what it should.
	expect func(w *world, o *outcome) error
	// checks adds verifications of the arrivals beyond at-least-once (each call
	// returns a fresh check).
	checks []func(w *world) check
}

// warmupShare is the share of the messages written before the fault begins.
const warmupShare = 0.25

// runScenario runs sc in its own world and returns its row; the test fails when the
// scenario does.
func runScenario(t *testing.T, f form, sc scenario, o *outcome) {
	timeout := 4*f.drainTimeout + 10*f.outage
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	phase := func(what string) { t.Logf("%7.2fs %s", time.Since(began).Seconds(), what) }
	w := newWorld(t, ctx, f, &sc)
	phase("services up")
	t.Logf("%s: %s (%s form: %d messages, outage %s)", sc.name, sc.about, f.name, f.messages, f.outage)
	defer func() {
		if t.Failed() {
			for _, r := range w.processes() {
				t.Logf("replica %s log (%s) ends:\n%s", r.id, r.log, r.tail(12))
			}
		}
	}()

	monCtx, stopMonitor := context.WithCancel(ctx)
	monitored := make(chan struct{})
	go func() { defer close(monitored); w.monitor(monCtx) }()
	defer func() { stopMonitor(); <-monitored }()

	if !sc.emptyDB {
		w.startReplicas()
		phase("replicas ready")
	}
	// Paced so that production spans the warm-up and the fault; it goes on, at that
	// pace, while a fault takes longer.
	rate := float64(f.messages) / (1.5 * f.outage.Seconds())
	prod := w.startProducers(f.messages, rate)
	defer prod.stop()
	if !sc.emptyDB {
		must(t, w.await("the warm-up messages", f.drainTimeout, func() (bool, error) {
			return w.ledger.progress() >= int(warmupShare*float64(f.messages)), nil
		}))
	}

	phase("fault begins")
	w.markFaultStart()
	err := sc.fault(w)
	if w.faultEnd.IsZero() {
		w.markFaultEnd()
	}
	if err != nil {
		t.Fatalf("fault: %v", err)
	}
	phase("fault over")
	prod.endFault()
	must(t, prod.wait(f.drainTimeout))
	phase("production over")
	must(t, w.ledger.resolve(ctx, w))
	committed := w.ledger.snapshot()

	drained, err := w.waitDrained(committed)
	if err != nil {
		counts, _ := w.statusCounts()
		t.Fatalf("%v (rows by status: %v)", err, counts)
	}
	from := w.faultEnd
	if last := w.ledger.lastCommitAt(); last.After(from) {
		from = last
	}
	o.Recover = max(drained.Sub(from), 0)
	phase("drained")

	// A batch still running after the drain holds no lease any more: its rows were
	// reclaimed and delivered by others. It writes back at most a publish timeout plus
	// a lease TTL after the fault ended (the pipeline's own bounds), and only then are
	// the replicas' counters final. Without reclaimed leases nothing can be in flight.
	must(t, w.scrapeAll())
	if w.total("outboxd_leases_reclaimed_total") > 0 {
		settle := w.faultEnd.Add(w.set.publishTimeout + w.set.leaseTTL + time.Second)
		if wait := time.Until(settle); wait > 0 {
			must(t, w.hold(wait))
		}
		must(t, w.scrapeAll())
	}
	phase("settled")
	o.Conflicts = int(w.total("outboxd_lease_conflicts_total"))
	// What explains duplicates: leases that expired and were reclaimed (the rows went
	// out again) and write-backs the replicas gave up.
	var wb writeBackFailures
	for _, r := range w.processes() {
		f, err := failedWriteBacks(r.log, time.Time{})
		must(t, err)
		wb.neverSent += f.neverSent
		wb.answerLost += f.answerLost
	}
	if reclaimed := w.total("outboxd_leases_reclaimed_total"); reclaimed > 0 || wb.neverSent+wb.answerLost > 0 {
		w.note("leases reclaimed: %.0f; write-backs reported failed: %d rows never sent, %d rows sent with the answer lost",
			reclaimed, wb.neverSent, wb.answerLost)
	}

	arrivals, err := w.collect(ctx)
	must(t, err)
	checks := []check{newAtLeastOnce(committed, w.ledger)}
	for _, c := range sc.checks {
		checks = append(checks, c(w))
	}
	verdict := judge(arrivals, committed, checks, o)
	if sc.expect != nil {
		if err := sc.expect(w, o); err != nil {
			verdict = joinErr(verdict, fmt.Errorf("expected effect: %w", err))
		}
	}
	w.mu.Lock()
	errs := w.errs
	w.mu.Unlock()
	for _, e := range errs {
		verdict = joinErr(verdict, e)
	}
	phase("verified")
	stopMonitor()
	<-monitored
	for _, r := range w.live() {
		if err := r.terminate(); err != nil {
			verdict = joinErr(verdict, fmt.Errorf("graceful stop: %w", err))
		}
	}
	phase("replicas stopped")
	l := w.ledger
	l.mu.Lock()
	w.note("transactions: %d committed, %d rolled back on purpose, %d failed and retried", l.txs.committed, l.txs.rolledBack, l.txs.failed)
	l.mu.Unlock()
	w.mu.Lock()
	o.Notes = append(o.Notes, w.notes...)
	w.mu.Unlock()
	if verdict != nil {
		t.Error(verdict)
	}
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return fmt.Errorf("%w\n%w", a, b)
}

// waitDrained waits until every committed message is confirmed: no row pending or
// leased, every core NATS message received, every dead letter in its stream. It
// returns when that was first seen.
func (w *world) waitDrained(committed map[int64]*produced) (time.Time, error) {
	deadLetters := 0
	for _, m := range committed {
		if m.DeadLetter {
			deadLetters++
		}
	}
	var at time.Time
	err := w.await("every committed message to be confirmed", w.f.drainTimeout, func() (bool, error) {
		n, err := w.backlog(w.ctx)
		if err != nil || n > 0 {
			return false, nil // a database that is still away is not an error here
		}
		if got, of := w.coreSub.seen(committed, streamPayments); got < of {
			return false, nil
		}
		if deadLetters > 0 {
			n, err := streamMsgs(w.ctx, w.js.URL(), deadStream)
			if err != nil || int(n) < deadLetters {
				return false, nil
			}
		}
		at = time.Now()
		return true, nil
	})
	return at, err
}

// collect reads back every destination.
func (w *world) collect(ctx context.Context) ([]arrival, error) {
	out, err := w.readKafka(ctx)
	if err != nil {
		return nil, err
	}
	shipments, err := readStream(ctx, w.js.URL(), jsStream, false)
	if err != nil {
		return nil, err
	}
	dead, err := readStream(ctx, w.js.URL(), deadStream, true)
	if err != nil {
		return nil, err
	}
	core, slow := w.coreSub.all()
	if slow > 0 {
		w.note("the core NATS subscriber reported %d errors (a slow consumer loses messages)", slow)
	}
	out = append(out, shipments...)
	out = append(out, dead...)
	return append(out, core...), nil
}

// results collects the rows of the scenarios that ran.
type results struct {
	mu   sync.Mutex
	rows []outcome
}

func (r *results) add(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, o)
}

// table renders the results as a Markdown table, in the order of the scenarios.
func (r *results) table(f form, order []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	byName := map[string]outcome{}
	for _, o := range r.rows {
		byName[o.Scenario] = o
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos suite, %s form: %d messages per scenario, outage %s\n\n", f.name, f.messages, f.outage)
	b.WriteString("| scenario | committed | delivered | lost | duplicates | lease conflicts | time to recover | result |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|\n")
	var notes strings.Builder
	for _, name := range order {
		o, ok := byName[name]
		if !ok {
			continue
		}
		if o.Skipped != "" {
			fmt.Fprintf(&b, "| %s | – | – | – | – | – | – | skipped: %s |\n", name, o.Skipped)
			continue
		}
		result := "ok"
		if o.Failed {
			result = "FAILED"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %s |\n", name, o.Committed, o.Delivered, o.Lost,
			o.Duplicates, o.Conflicts, o.Recover.Round(10*time.Millisecond), result)
		for _, n := range o.Notes {
			fmt.Fprintf(&notes, "- %s: %s\n", name, n)
		}
	}
	if notes.Len() > 0 {
		b.WriteString("\n")
		b.WriteString(notes.String())
	}
	return b.String()
}

func TestChaos(t *testing.T) {
	f, err := currentForm()
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		t.Skip("the fault-injection suite starts real outboxd processes; -short skips it")
	}
	parallel := f.parallel
	if err := suitePostgres(); err != nil {
		// The shared server has too few connections for three scenarios of three
		// replicas each at once.
		t.Logf("no private PostgreSQL for the suite (%v): scenarios run one at a time on the shared server", err)
		parallel = false
	}
	var res results
	var order []string
	t.Run("scenario", func(t *testing.T) {
		for _, sc := range scenarios() {
			order = append(order, sc.name)
			t.Run(sc.name, func(t *testing.T) {
				if parallel {
					t.Parallel()
				}
				o := outcome{Scenario: sc.name}
				defer func() {
					o.Failed = t.Failed()
					if t.Skipped() {
						o.Skipped = "skipped"
					}
					res.add(o)
				}()
				runScenario(t, f, sc, &o)
			})
		}
	})
	table := res.table(f, order)
	t.Logf("\n%s", table)
	if path := os.Getenv(envReport); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		}
	}
}

// TestEveryScenarioIsDocumented keeps docs/chaos.md's scenario table and the suite in step.
func TestEveryScenarioIsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/chaos.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	documented := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if i := strings.Index(name, "` |"); i > 0 {
				documented[name[:i]] = true
			}
		}
	}
	for _, sc := range scenarios() {
		if !documented[sc.name] {
			t.Errorf("scenario %s has no row in docs/chaos.md's scenario table", sc.name)
		}
		delete(documented, sc.name)
	}
	for name := range documented {
		t.Errorf("docs/chaos.md documents a scenario %s the suite does not have", name)
	}
}
