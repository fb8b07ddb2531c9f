package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// demoTable is where the demo writes: a schema of its own, dropped and recreated at
// every start, so the demo never touches an application's outbox.
var demoTable = table.Name{Schema: "outboxd_demo", Table: "messages"}

const (
	demoSubjectPrefix = "demo."
	demoDriverName    = "demo" // the driver the demo's stream is routed to
)

// Summary is the demo's result; --json prints exactly these fields.
type Summary = demoSummary

type demoSummary struct {
	Produced     int64   `json:"produced"`
	Committed    int64   `json:"committed"`
	RolledBack   int64   `json:"rolled_back"`
	Delivered    int64   `json:"delivered"`
	Duplicates   int64   `json:"duplicates"`
	Lost         int64   `json:"lost"`
	Phantoms     int64   `json:"phantoms"`
	MsgsPerSec   float64 `json:"msgs_per_sec"`
	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
	Seconds      float64 `json:"seconds"`
	// PeakRSSMiB is the demo process's peak resident set (getrusage), the embedded
	// NATS server and its JetStream store included; 0 where the system does not say.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// Run is outboxd demo: a destination (--driver; by default an embedded NATS server with
// JetStream), a dispatcher, concurrent producers and a consumer at the destination,
// ending with a summary. Mistakes in o fail as OptionError
// before anything starts.
func Run(ctx context.Context, o Options) error {
	switch {
	case o.Messages < 1:
		return OptionError("demo: --messages must be at least 1")
	case o.Producers < 1 || o.Batch < 1 || o.RollbackEvery < 0 || o.LoseAnswerEvery < 0:
		return OptionError("demo: --producers and --batch must be at least 1, --rollback-every and --lose-answer-every at least 0")
	}
	spec, err := targetOf(o.Driver)
	if err != nil {
		return err
	}
	if spec.embedded && !bench.Embedded {
		return fmt.Errorf("demo: %w, which the demo runs on with --driver %s: use a build without the tag (make demo builds one)", bench.ErrNotEmbedded, spec.typ)
	}
	cfg := config.Default()
	if o.DatabaseURL != "" {
		cfg.DatabaseURL = o.DatabaseURL
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if !o.JSON {
		logger = app.NewLogger(config.Log{Level: "warn", Format: "text"}, o.Stderr)
	}

	// A fresh demo table.
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("demo: database_url: %w", config.RedactParseError(err))
	}
	defer pool.Close()
	if err := store.DropSchema(ctx, pool, demoTable.Schema); err != nil {
		return fmt.Errorf("demo: connect to database %s: %w", config.RedactDSN(cfg.DatabaseURL), err)
	}
	cfg.Schema, cfg.TableName = demoTable.Schema, demoTable.Table
	dest, err := spec.open(ctx, o, targetEnv{pool: pool, dsn: cfg.DatabaseURL, schema: demoTable.Schema})
	if err != nil {
		return err
	}
	defer dest.close()
	section, prefix := dest.driver()
	cfg.Drivers = map[string]config.Driver{demoDriverName: section}
	stream := config.DefaultStream()
	stream.Driver, stream.TopicPrefix = demoDriverName, prefix
	stream.BatchSize = 500
	cfg.Streams = map[string]config.Stream{"demo": stream}
	if err := cfg.Validate(); err != nil {
		return err
	}

	run := newDemoRun(o.Messages)
	timer := func(to router.Destination, next router.Sender) router.Sender {
		if to.DeadLetter {
			return next
		}
		return (&timedPublisher{next: next, run: run, loseEvery: o.LoseAnswerEvery}).Publish
	}
	d, err := app.NewDispatcher(ctx, &cfg, logger, app.Options{Migrate: true, Middleware: []router.Middleware{timer}})
	if err != nil {
		return err
	}
	absorbed := dest.absorbed(d)
	runCtx, stopDispatcher := context.WithCancel(ctx)
	dispatched := make(chan error, 1)
	go func() { dispatched <- d.Run(runCtx) }()

	// The consumer: every copy that arrived, counted by its Outbox-Message-Id.
	stopConsuming, err := dest.consume(ctx, func(id string) { run.receive(run.seq(id)) })
	if err != nil {
		stopDispatcher()
		return fmt.Errorf("demo: read %s: %w", o.Driver, err)
	}
	defer stopConsuming()

	start := time.Now()
	writer, err := producer.New(demoTable)
	if err != nil {
		stopDispatcher()
		return err
	}
	produceErr := make(chan error, 1)
	go func() {
		produceErr <- run.produce(ctx, pool, writer, o.Messages, o.Producers, o.Batch, o.RollbackEvery)
	}()

	// Wait until everything committed has arrived, or the timeout.
	// Progress is a line rewritten in place, so only on a terminal; elsewhere (a pipe, a
	// log file, --json) nothing stands in for it: the summary follows within seconds.
	showProgress := !o.JSON && ops.IsTerminal(o.Stderr)
	deadline := time.After(o.Timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	produced := false
	var failure error
wait:
	for {
		select {
		case err := <-produceErr:
			produced = true
			if err != nil {
				failure = err
				break wait
			}
		case <-tick.C:
			if showProgress {
				run.progress(o.Stderr, time.Since(start))
			}
		case <-deadline:
			failure = fmt.Errorf("demo: not every committed message arrived within %s", o.Timeout)
			break wait
		case <-ctx.Done():
			failure = ctx.Err()
			break wait
		}
		if produced && run.allArrived() {
			// Arrived is not yet acknowledged: a batch whose answer was lost is
			// published again after its backoff, and only then do its copies count.
			settled, err := backlogSettled(ctx, d, "demo")
			if err != nil {
				failure = err
				break
			}
			if settled {
				break
			}
		}
	}
	elapsed := time.Since(start)
	stopDispatcher()
	if err := <-dispatched; err != nil && failure == nil {
		failure = err
	}
	sum := run.summary(elapsed, absorbed())
	sum.PeakRSSMiB = math.Round(bench.SelfPeakRSSMiB()*10) / 10
	if o.JSON {
		out, _ := json.Marshal(sum)
		fmt.Fprintln(o.Stdout, string(out))
	} else {
		if showProgress {
			fmt.Fprint(o.Stderr, "\r\033[K")
		}
		printSummary(o.Stdout, sum, config.RedactDSN(cfg.DatabaseURL), spec)
	}
	if failure != nil {
		return failure
	}
	if sum.Lost > 0 || sum.Phantoms > 0 {
		return fmt.Errorf("demo: %d committed messages lost, %d rolled-back messages delivered", sum.Lost, sum.Phantoms)
	}
	return nil
}

// demoIDPrefix starts every message id the demo produces; the number after it is the
// message's sequence, 0 to --messages-1.
const demoIDPrefix = "demo-"

// The states of a message in demoRun.state; 0 is in flight (its transaction not ended).
const (
	demoCommitted  uint8 = iota + 1 // its transaction committed
	demoRolledBack                  // its transaction rolled back on purpose
)

// demoRun is the demo's bookkeeping, one slot per message sequence. It is kept in flat
// slices, not in maps keyed by id: the demo's memory is part of what it shows, and maps
// of id strings held ~240 bytes per message until the summary (twice that with the
// garbage collector's headroom), more than the embedded JetStream server held.
type demoRun struct {
	mu          sync.Mutex
	epoch       time.Time       // the instants below are offsets from it
	state       []uint8         // 0 (in flight), demoCommitted or demoRolledBack
	committedAt []time.Duration // when the commit returned
	confirmedAt []time.Duration // when the broker first confirmed it; 0: not yet
	received    []uint32        // copies the consumer saw
	strangers   int64           // arrivals whose id is none of this run's: phantoms
	produced    atomic.Int64
	committed   atomic.Int64
	arrived     atomic.Int64 // distinct committed messages received
}

func newDemoRun(n int) *demoRun {
	return &demoRun{epoch: time.Now(), state: make([]uint8, n), committedAt: make([]time.Duration, n),
		confirmedAt: make([]time.Duration, n), received: make([]uint32, n)}
}

// seq is the sequence of the message whose id (or broker de-duplication id, which may
// qualify it) ends in demoIDPrefix and a number; -1 for any other id.
func (r *demoRun) seq(id string) int {
	i := strings.LastIndex(id, demoIDPrefix)
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(id[i+len(demoIDPrefix):])
	if err != nil || n < 0 || n >= len(r.state) {
		return -1
	}
	return n
}

// produce writes n messages from several goroutines, each in transactions of perTx,
// rolling back every rollbackEvery-th transaction.
func (r *demoRun) produce(ctx context.Context, pool *pgxpool.Pool, w *producer.Writer, n, workers, perTx, rollbackEvery int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for p := 0; p < workers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for txn := 1; ; txn++ {
				first := next.Add(int64(perTx)) - int64(perTx)
				if first >= int64(n) {
					return
				}
				count := min(int64(perTx), int64(n)-first)
				msgs := make([]producer.Message, count)
				for i := range msgs {
					seq := strconv.FormatInt(first+int64(i), 10)
					msgs[i] = producer.Message{Stream: "demo", Topic: "orders", Key: strconv.FormatInt((first+int64(i))%100, 10),
						Headers: map[string]string{"content-type": "application/json"}, MessageID: demoIDPrefix + seq,
						Payload: []byte(`{"order":` + seq + `,"state":"paid"}`)}
				}
				rollback := rollbackEvery > 0 && (first/int64(perTx))%int64(rollbackEvery) == int64(rollbackEvery-1)
				if err := r.transaction(ctx, pool, w, msgs, int(first), rollback); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// transaction enqueues msgs, sequences first onwards, in one transaction.
func (r *demoRun) transaction(ctx context.Context, pool *pgxpool.Pool, w *producer.Writer, msgs []producer.Message, first int, rollback bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("demo producer: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := w.EnqueueBatch(ctx, tx, msgs); err != nil {
		return fmt.Errorf("demo producer: %w", err)
	}
	r.produced.Add(int64(len(msgs)))
	seqs := r.state[first : first+len(msgs)]
	if rollback {
		r.mu.Lock()
		for i := range seqs {
			seqs[i] = demoRolledBack
		}
		r.mu.Unlock()
		return tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("demo producer: commit: %w", err)
	}
	now := time.Since(r.epoch)
	r.mu.Lock()
	for i := range seqs {
		seqs[i] = demoCommitted
		r.committedAt[first+i] = now
	}
	r.mu.Unlock()
	r.committed.Add(int64(len(msgs)))
	return nil
}

// receive counts an arrival of message seq (-1: an id this run never produced).
func (r *demoRun) receive(seq int) {
	r.mu.Lock()
	if seq < 0 {
		r.strangers++
		r.mu.Unlock()
		return
	}
	r.received[seq]++
	first := r.received[seq] == 1 && r.state[seq] != demoRolledBack
	r.mu.Unlock()
	if first {
		r.arrived.Add(1)
	}
}

func (r *demoRun) allArrived() bool { return r.arrived.Load() >= r.committed.Load() }

func (r *demoRun) progress(w io.Writer, elapsed time.Duration) {
	arrived := r.arrived.Load()
	fmt.Fprintf(w, "\r\033[Kproduced %d  committed %d  delivered %d  %.0f msg/s  %s",
		r.produced.Load(), r.committed.Load(), arrived, float64(arrived)/elapsed.Seconds(), elapsed.Truncate(100*time.Millisecond))
}

// summary sums up the run. brokerDuplicates is how many copies the stream answered as
// duplicates (and so never stored): they add to the repeats the consumer saw.
func (r *demoRun) summary(elapsed time.Duration, brokerDuplicates int64) demoSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := demoSummary{Produced: r.produced.Load(), Duplicates: brokerDuplicates, Phantoms: r.strangers, Seconds: elapsed.Seconds()}
	lat := make([]time.Duration, 0, r.committed.Load())
	for seq, state := range r.state {
		switch state {
		case demoRolledBack:
			s.RolledBack++
			if r.received[seq] > 0 {
				s.Phantoms++
			}
			continue
		case demoCommitted:
			s.Committed++
			if c := r.confirmedAt[seq]; c > 0 {
				lat = append(lat, c-r.committedAt[seq])
			}
		}
		if n := int64(r.received[seq]); n > 0 {
			s.Delivered++
			s.Duplicates += n - 1
		}
	}
	s.Lost = s.Committed - s.Delivered
	s.MsgsPerSec = float64(s.Delivered) / elapsed.Seconds()
	slices.Sort(lat)
	s.LatencyP50Ms, s.LatencyP99Ms = bench.PercentileMs(lat, 0.50), bench.PercentileMs(lat, 0.99)
	return s
}

func printSummary(w io.Writer, s demoSummary, dsn string, spec targetSpec) {
	fmt.Fprintf(w, `outboxd demo: PostgreSQL table %s → %s

  produced      %d (in transactions; %d rolled back on purpose)
  committed     %d
  delivered     %d
  duplicates    %d
  lost          %d
  phantoms      %d (rolled-back messages that arrived; must be 0)
  throughput    %.0f msg/s over %.1fs
  commit→ack    p50 %.1f ms, p99 %.1f ms (commit returned → %s)
`, demoTable, spec.title, s.Produced, s.RolledBack, s.Committed, s.Delivered, s.Duplicates, s.Lost, s.Phantoms,
		s.MsgsPerSec, s.Seconds, s.LatencyP50Ms, s.LatencyP99Ms, spec.confirmed)
	if s.PeakRSSMiB > 0 {
		fmt.Fprintf(w, "  memory        peak RSS %.0f MiB (this process%s)\n", s.PeakRSSMiB, embeddedNote(spec))
	}
	fmt.Fprintf(w, `
Inspect the table:
  psql "%s" -c 'SELECT * FROM %s'
`, dsn, demoTable.Schema+"."+demoTable.Table+"_stats")
}

// backlogSettled reports whether stream has no row left pending or leased: every
// committed message was acknowledged, not only published.
func backlogSettled(ctx context.Context, d *app.Dispatcher, stream string) (bool, error) {
	backlogs, err := d.Store().Backlogs(ctx, []string{stream})
	if err != nil {
		return false, fmt.Errorf("demo: %w", err)
	}
	for _, b := range backlogs {
		if b.Pending+b.Leased > 0 {
			return false, nil
		}
	}
	return true, nil
}

// timedPublisher records when the broker confirmed each message. With loseEvery > 0
// it also loses the answer to every loseEvery-th batch it publishes, each message at
// most once: the broker stored the messages, the dispatcher is told the publish failed
// and publishes them again.
type timedPublisher struct {
	next      router.Sender
	run       *demoRun
	loseEvery int
	batches   int    // published so far; Publish runs on the stream's workers
	lost      []bool // by sequence: messages whose answer was lost once
}

// errAnswerLost is what a publish whose answer --lose-answer-every dropped reports.
var errAnswerLost = errors.New("demo: the broker's answer was lost on purpose (--lose-answer-every)")

func (t *timedPublisher) Publish(ctx context.Context, msgs []router.Message) []error {
	errs := t.next(ctx, msgs)
	now := time.Since(t.run.epoch)
	t.run.mu.Lock()
	t.batches++
	if t.loseEvery > 0 && t.batches%t.loseEvery == 0 {
		if t.lost == nil {
			t.lost = make([]bool, len(t.run.state))
		}
		for i, err := range errs {
			if seq := t.run.seq(msgs[i].MessageID); err == nil && seq >= 0 && !t.lost[seq] {
				t.lost[seq] = true
				errs[i] = router.Retryable(errAnswerLost)
			}
		}
	}
	for i, err := range errs {
		if seq := t.run.seq(msgs[i].MessageID); err == nil && seq >= 0 && t.run.confirmedAt[seq] == 0 {
			t.run.confirmedAt[seq] = max(now, 1) // 0 means not yet
		}
	}
	t.run.mu.Unlock()
	return errs
}

// embeddedNote says what the demo's peak memory includes besides the demo itself.
func embeddedNote(spec targetSpec) string {
	if spec.embedded {
		return ", the embedded NATS server included"
	}
	return ""
}
