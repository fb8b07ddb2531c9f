package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/store"
)

// drainSpec is one drain: its driver and, for the scale modes, the binary run as the
// dispatcher, how many of them share the table, and the backlog.
type drainSpec struct {
	driver   string
	binary   string // "": --dispatcher-binary's (or the outboxd beside this executable)
	replicas int    // dispatcher processes on the one table; 0 is 1
	messages int    // backlog; 0 is --messages
	// filled: the backlog is in the table already (the large-backlog mode fills it once).
	filled bool
	// delivered counts the backlog's rows delivered before the drain (the large-backlog
	// mode's SQL ceiling acknowledged them): the drain's count of delivered rows leaves
	// them out. messages still counts them.
	delivered int64
	// until, when set, ends the drain early: it is asked with the messages the
	// dispatchers have published so far (their /metrics) and the time since start.
	until func(published float64, since time.Duration) bool
	// sampleConnections samples the dispatchers' sessions in pg_stat_activity.
	sampleConnections bool
	// failedAllowed counts messages the driver refused for good (rows left failed, not
	// delivered) as failed rather than missing: big payloads above a broker's limit.
	failedAllowed bool
	// idle first starts the dispatcher on an empty table and reads its resident set
	// idle (idleRSS).
	idle bool
}

// drainOutcome is a drain's figures and what the scale modes read beside them.
type drainOutcome struct {
	benchDrain
	peakConnections int
	leaseConflicts  int64
	serverCPU       float64 // database server CPU seconds over the drain; -1: not local
	firstOutMs      float64 // exec of the first dispatcher → its first message published
	published       int64   // what the dispatchers' /metrics counted when the drain ended
	failed          int64   // with failedAllowed: backlog rows not delivered
}

// drain fills a fresh backlog, runs `outboxd run` as a child process until every row
// has left pending and leased, stops it with SIGTERM and reads its resource use. Then it
// counts what arrived, at the broker and in the table: a committed message missing from
// either is reported, and makes the bench fail.
//
// Time runs from the child's "dispatching" log line (its pool connected, its schema
// checked) until the table shows no pending or leased row, asked every 10 ms.
func (b *bench) drain(ctx context.Context, driverType string) (benchDrain, error) {
	out, err := b.drainWith(ctx, drainSpec{driver: driverType, idle: true})
	return out.benchDrain, err
}

// drainWith is drain as spec says. With several replicas, time runs from the last one's
// "dispatching" line.
func (b *bench) drainWith(ctx context.Context, spec drainSpec) (drainOutcome, error) {
	var out drainOutcome
	phase := "drain " + spec.driver
	n := cmp.Or(spec.messages, b.opt.set.Messages)
	replicas := max(spec.replicas, 1)
	if replicas > 1 {
		phase += fmt.Sprintf(", %d replicas", replicas)
	}
	if spec.idle {
		if err := b.idleRSS(ctx, spec.driver, cmp.Or(spec.binary, b.opt.binary), &out.benchDrain); err != nil {
			return out, fmt.Errorf("bench: %s, idle: %w", phase, err)
		}
	}
	if !spec.filled {
		if err := b.fill(ctx, phase, n); err != nil {
			return out, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	ids, err := b.ids(ctx)
	if err != nil {
		return out, err
	}
	counter, err := b.arrivals(ctx, spec.driver)
	if err != nil {
		return out, err
	}
	defer counter.close()
	cfg, err := b.dispatcherConfig(spec.driver)
	if err != nil {
		return out, err
	}
	binary := cmp.Or(spec.binary, b.opt.binary)
	postmaster, local, err := b.localServer(ctx)
	if err != nil {
		return out, fmt.Errorf("bench: %s: %w", phase, err)
	}
	var cpuBefore float64
	if local {
		cpuBefore = serverCPU(postmaster)
	}
	children := make([]*dispatcherProcess, replicas)
	for i := range children {
		c := cfg
		if replicas > 1 {
			c.ReplicaID = fmt.Sprintf("%s-%d", benchReplica, i+1)
		}
		child, err := startDispatcher(ctx, binary, benchEnviron(b.o.Environ, c))
		if err != nil {
			return out, err
		}
		defer child.kill()
		children[i] = child
	}
	for _, child := range children {
		if err := awaitStart(ctx, child, child.dispatching, "dispatching"); err != nil {
			return out, err
		}
	}
	start := time.Now()
	cpuAtStart := markCPU(postmaster, local, children)
	var left atomic.Int64
	left.Store(int64(n))
	b.progress.begin(phase, int64(n), func() int64 { return int64(n) - left.Load() })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	exited := make(chan *dispatcherProcess, replicas)
	for _, child := range children {
		go func() {
			select {
			case <-child.exited:
				exited <- child
			case <-ctx.Done():
			}
		}()
	}
	published := func() float64 {
		var sum float64
		for _, c := range children {
			sum += max(c.metric(ctx, "outboxd_messages_published_total"), 0)
		}
		return sum
	}
	var mark store.BenchBacklogMark // the drain inserts nothing: undelivered rows only leave
	for i := 1; ; i++ {
		select {
		case <-tick.C:
		case child := <-exited:
			return out, child.failure("exited during the drain")
		case <-ctx.Done():
			return out, fmt.Errorf("bench: %s: %d of %d messages not delivered within %s", phase, left.Load(), n, b.opt.timeout)
		}
		if spec.sampleConnections && i%10 == 1 {
			conns, err := store.BenchConnections(ctx, b.pool, benchApplication)
			if err != nil {
				return out, fmt.Errorf("bench: %s: %w", phase, err)
			}
			out.peakConnections = max(out.peakConnections, conns)
		}
		if spec.until != nil {
			p := published()
			if out.firstOutMs == 0 && p > 0 {
				out.firstOutMs = round(float64(time.Since(children[0].execAt).Microseconds())/1000, 1)
			}
			if spec.until(p, time.Since(start)) {
				out.published = int64(p)
				break
			}
			continue
		}
		undelivered, err := b.store.BenchUndelivered(ctx, &mark)
		if err != nil {
			return out, fmt.Errorf("bench: %s: %w", phase, err)
		}
		if !undelivered {
			break
		}
		if i%50 == 0 && b.progress.animate {
			// Counting walks the whole backlog: only for the display, and rarely, so
			// that the bench does not slow down what it measures.
			backlogs, err := b.store.Backlogs(ctx, b.streams)
			if err != nil {
				return out, fmt.Errorf("bench: %s: %w", phase, err)
			}
			var sum int64
			for _, bl := range backlogs {
				sum += bl.Pending + bl.Leased
			}
			left.Store(sum)
		}
	}
	elapsed := time.Since(start)
	left.Store(0)
	cpuAtEnd := markCPU(postmaster, local, children)
	cpuInDrain := cpuAtEnd.since(cpuAtStart)
	out.serverCPU = -1
	if local {
		out.serverCPU = round(cpuAtEnd.server-cpuBefore, 2)
	}
	for _, child := range children {
		if c := child.metric(ctx, "outboxd_lease_conflicts_total"); c > 0 {
			out.leaseConflicts += int64(c)
		}
	}
	var discarded int64
	known := true
	for _, child := range children {
		if err := child.stop(); err != nil {
			return out, err
		}
		t := child.discardTotal()
		known = known && t >= 0
		discarded += max(t, 0)
	}
	moved := int64(n)
	if spec.until != nil {
		moved = out.published
	}
	r := out.benchDrain // the idle figures, if measured
	r.Messages, r.Seconds, r.MsgsPerSec = int64(n), round(elapsed.Seconds(), 3), round(float64(moved)/elapsed.Seconds(), 1)
	for _, child := range children {
		cpu, rss := child.usage()
		r.DispatcherCPUSeconds += cpu
		r.DispatcherPeakRSSMiB = max(r.DispatcherPeakRSSMiB, rss)
	}
	r.DispatcherCPUSeconds, r.DispatcherPeakRSSMiB = round(r.DispatcherCPUSeconds, 3), round(r.DispatcherPeakRSSMiB, 1)
	r.cpuShares(cpuInDrain, moved)
	if dest, err := destOf(spec.driver); err == nil && dest.inBench != nil {
		r.destInBench = dest.inBench(b.opt.raw)
	}
	if !spec.idle { // the idle start's, on an empty table, are the cleaner figure
		r.ReadyDispatchingMs, r.ReadyzMs = children[0].readiness()
	}
	b.readiness = append(b.readiness, [2]float64{r.ReadyDispatchingMs, r.ReadyzMs})
	if r.DeliveredInTable, err = b.deliveredInTable(ctx, int64(n)); err != nil {
		return out, fmt.Errorf("bench: %s: count delivered rows: %w", phase, err)
	}
	r.DeliveredInTable -= spec.delivered
	r.CountedBy = counter.countedBy()
	// The discard counter reads one process's total: with several, their sum.
	whole := &dispatcherProcess{discarded: discarded}
	if !known {
		whole.discarded = -1
	}
	if r.ArrivedAtBroker, r.DuplicatesAtBroker, err = counter.count(ctx, ids, whole); err != nil {
		return out, fmt.Errorf("bench: %s: count arrivals: %w", phase, err)
	}
	if spec.until != nil || spec.failedAllowed {
		// Stopped early, or refusals allowed: what the table shows delivered must have arrived.
		r.Missing = max(0, r.DeliveredInTable-r.ArrivedAtBroker)
		if spec.failedAllowed {
			out.failed = int64(n) - r.DeliveredInTable
		}
	} else {
		r.Missing = int64(n) - min(r.DeliveredInTable, r.ArrivedAtBroker)
	}
	summary := fmt.Sprintf("%s msg/s; %s delivered in the table, %s arrived", thousands(r.MsgsPerSec),
		thousands(float64(r.DeliveredInTable)), thousands(float64(r.ArrivedAtBroker)))
	if r.Missing > 0 {
		summary += fmt.Sprintf(", %d MISSING", r.Missing)
	}
	b.progress.end(summary)
	out.benchDrain = r
	return out, nil
}

// deliveredInTable counts the backlog's rows the table shows delivered: marked so, or,
// when acknowledging deletes (--ack delete), gone from a table in which nothing else
// deletes a row that is not delivered.
func (b *bench) deliveredInTable(ctx context.Context, backlog int64) (int64, error) {
	if b.opt.set.Ack == benchAckDelete {
		left, err := b.store.BenchCount(ctx, b.retainedUpTo, false)
		return backlog - left, err
	}
	return b.store.BenchCount(ctx, b.retainedUpTo, true)
}

// ids lists the ids of the backlog's committed rows. The --retained rows (ids up to
// retainedUpTo) are left out: they were delivered before the drain and never arrive, so
// counting against them would let extra copies pass for arrivals.
func (b *bench) ids(ctx context.Context) ([]int64, error) {
	ids, err := b.store.BenchIDs(ctx, b.retainedUpTo)
	if err != nil {
		return nil, fmt.Errorf("bench: the backlog: %w", err)
	}
	return ids, nil
}

// benchEnviron is the child dispatcher's environment: the parent's without any
// OUTBOXD_ variable (a user's own settings must not leak in), plus cfg as variables.
func benchEnviron(parent []string, cfg config.Config) []string {
	var env []string
	for _, kv := range parent {
		if !strings.HasPrefix(kv, "OUTBOXD_") {
			env = append(env, kv)
		}
	}
	set := func(key, value string) { env = append(env, "OUTBOXD_"+key+"="+value) }
	set("DATABASE_URL", cfg.DatabaseURL)
	set("SCHEMA", cfg.Schema)
	set("TABLE", cfg.TableName)
	set("REPLICA_ID", cfg.ReplicaID)
	set("LOG__LEVEL", "info") // the bench reads the "dispatching" line and the discard totals
	set("LOG__FORMAT", "json")
	set("HTTP__ADDR", cfg.HTTP.Addr)
	set("JANITOR__RETENTION", cfg.Janitor.Retention.String())
	for name, d := range cfg.Drivers {
		prefix := "DRIVERS__" + strings.ToUpper(name) + "__"
		set(prefix+"TYPE", d.Type)
		if dest, err := destOf(d.Type); err == nil {
			opts := dest.environ(d.Options)
			for _, key := range slices.Sorted(maps.Keys(opts)) {
				set(prefix+key, opts[key])
			}
		}
	}
	for name, s := range cfg.Streams {
		prefix := "STREAMS__" + strings.ToUpper(name) + "__"
		set(prefix+"DRIVER", s.Driver)
		set(prefix+"TOPIC_PREFIX", s.TopicPrefix)
		set(prefix+"BATCH_SIZE", strconv.Itoa(s.BatchSize))
		set(prefix+"CONCURRENCY", strconv.Itoa(s.Concurrency))
		set(prefix+"ORDERED", strconv.FormatBool(s.Ordered))
		set(prefix+"FLOW", strconv.FormatBool(s.Flow))
	}
	return env
}

// arrivalCounter counts, after a drain, the backlog's messages that reached the
// destination.
type arrivalCounter interface {
	// count returns how many of ids arrived and how many extra copies arrived.
	count(ctx context.Context, ids []int64, child *dispatcherProcess) (arrived, duplicates int64, err error)
	countedBy() string
	close()
}

// arrivals prepares the count of one drain before its dispatcher starts.
func (b *bench) arrivals(ctx context.Context, driverType string) (arrivalCounter, error) {
	dest, err := destOf(driverType)
	if err != nil {
		return nil, err
	}
	return dest.arrivals(ctx, b)
}

// discardCounter reads the discard driver's own count, which the child logs when it
// closes the driver. It counts messages, not ids.
type discardCounter struct{}

func (discardCounter) countedBy() string {
	return "the discard driver's counter (logged by the dispatcher at exit)"
}
func (discardCounter) close() {}

func (discardCounter) count(_ context.Context, ids []int64, child *dispatcherProcess) (int64, int64, error) {
	total := child.discardTotal()
	if total < 0 {
		return 0, 0, errors.New("the dispatcher did not log the discard driver's totals")
	}
	arrived := min(total, int64(len(ids)))
	return arrived, total - arrived, nil
}

// tally counts arrivals by outbox id.
type tally struct {
	mu    sync.Mutex
	seen  map[int64]int
	total int64
}

func newTally() *tally { return &tally{seen: map[int64]int{}} }

func (t *tally) add(id string) {
	n, err := strconv.ParseInt(id, 10, 64)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	if err == nil {
		t.seen[n]++
	}
}

func (t *tally) count() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// against returns how many of ids arrived, and the extra copies of those that did.
func (t *tally) against(ids []int64) (arrived, duplicates int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		if c := t.seen[id]; c > 0 {
			arrived++
			duplicates += int64(c - 1)
		}
	}
	return arrived, duplicates
}

// localServer finds the postmaster of the server the bench's pool talks to, through one
// of its sessions' backend pid; local is false when that server is not on this machine.
func (b *bench) localServer(ctx context.Context) (postmaster int, local bool, err error) {
	backend, err := store.BenchBackendPID(ctx, b.pool)
	if err != nil {
		return 0, false, err
	}
	postmaster, local = postmasterOf(backend)
	return postmaster, local, nil
}
