package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router/discard"
)

// drain fills a fresh backlog, runs `outboxd run` as a child process until every row
// has left pending and leased, stops it with SIGTERM and reads its resource use. Then it
// counts what arrived, at the broker and in the table: a committed message missing from
// either is reported, and makes the bench fail.
//
// Time runs from the child's "dispatching" log line (its pool connected, its schema
// checked) until the table shows no pending or leased row, asked every 10 ms.
func (b *bench) drain(ctx context.Context, driverType string) (benchDrain, error) {
	phase := "drain " + driverType
	n := b.opt.set.Messages
	if err := b.fill(ctx, phase, n); err != nil {
		return benchDrain{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	ids, err := b.ids(ctx)
	if err != nil {
		return benchDrain{}, err
	}
	counter, err := b.arrivals(ctx, driverType)
	if err != nil {
		return benchDrain{}, err
	}
	defer counter.close()
	cfg, err := b.dispatcherConfig(driverType)
	if err != nil {
		return benchDrain{}, err
	}
	child, err := startDispatcher(ctx, b.opt.binary, benchEnviron(b.o.Environ, cfg))
	if err != nil {
		return benchDrain{}, err
	}
	defer child.kill()
	select {
	case <-child.dispatching:
	case <-child.exited:
		return benchDrain{}, child.failure("exited before dispatching")
	case <-time.After(30 * time.Second):
		return benchDrain{}, child.failure("did not start dispatching within 30s")
	case <-ctx.Done():
		return benchDrain{}, ctx.Err()
	}
	start := time.Now()
	var left atomic.Int64
	left.Store(int64(n))
	b.progress.begin(phase, int64(n), func() int64 { return int64(n) - left.Load() })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-tick.C:
		case <-child.exited:
			return benchDrain{}, child.failure("exited during the drain")
		case <-ctx.Done():
			return benchDrain{}, fmt.Errorf("bench: %s: %d of %d messages not delivered within %s", phase, left.Load(), n, b.opt.timeout)
		}
		undelivered, err := b.store.BenchUndelivered(ctx)
		if err != nil {
			return benchDrain{}, fmt.Errorf("bench: %s: %w", phase, err)
		}
		if !undelivered {
			break
		}
		if i%50 == 0 && b.progress.animate {
			// Counting walks the whole backlog: only for the display, and rarely, so
			// that the bench does not slow down what it measures.
			backlogs, err := b.store.Backlogs(ctx, b.streams)
			if err != nil {
				return benchDrain{}, fmt.Errorf("bench: %s: %w", phase, err)
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
	if err := child.stop(); err != nil {
		return benchDrain{}, err
	}

	r := benchDrain{Messages: int64(n), Seconds: round(elapsed.Seconds(), 3), MsgsPerSec: round(float64(n)/elapsed.Seconds(), 1)}
	r.DispatcherCPUSeconds, r.DispatcherPeakRSSMiB = child.usage()
	r.DispatcherCPUSeconds, r.DispatcherPeakRSSMiB = round(r.DispatcherCPUSeconds, 3), round(r.DispatcherPeakRSSMiB, 1)
	if r.DeliveredInTable, err = b.deliveredInTable(ctx, int64(n)); err != nil {
		return r, fmt.Errorf("bench: %s: count delivered rows: %w", phase, err)
	}
	r.CountedBy = counter.countedBy()
	if r.ArrivedAtBroker, r.DuplicatesAtBroker, err = counter.count(ctx, ids, child); err != nil {
		return r, fmt.Errorf("bench: %s: count arrivals: %w", phase, err)
	}
	r.Missing = int64(n) - min(r.DeliveredInTable, r.ArrivedAtBroker)
	summary := fmt.Sprintf("%s msg/s; %s delivered in the table, %s arrived", thousands(r.MsgsPerSec),
		thousands(float64(r.DeliveredInTable)), thousands(float64(r.ArrivedAtBroker)))
	if r.Missing > 0 {
		summary += fmt.Sprintf(", %d MISSING", r.Missing)
	}
	b.progress.end(summary)
	return r, nil
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

// dispatcherProcess is `outboxd run` as a child process, its JSON log read line by line.
type dispatcherProcess struct {
	cmd         *exec.Cmd
	dispatching chan struct{} // closed at the "dispatching" line
	exited      chan struct{} // closed once the process has been waited for
	waitErr     error         // valid once exited is closed

	mu        sync.Mutex
	tail      []string // the last lines of its log
	discarded int64    // the discard driver's total, -1 until its closing line

	peakRSSKiB int64 // VmHWM read just before SIGTERM; 0 where not available
}

// usage is the dispatcher's CPU time (user + system) and peak resident set.
func (p *dispatcherProcess) usage() (cpuSeconds, peakRSSMiB float64) {
	cpuSeconds, peakRSSMiB = processUsage(p.cmd.ProcessState)
	if p.peakRSSKiB > 0 {
		peakRSSMiB = float64(p.peakRSSKiB) / 1024
	}
	return cpuSeconds, peakRSSMiB
}

// readPeakRSS returns the peak resident set of a running process in KiB from
// /proc/<pid>/status (VmHWM), or 0 where there is no such file.
func readPeakRSS(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kib
		}
	}
	return 0
}

func startDispatcher(ctx context.Context, binary string, environ []string) (*dispatcherProcess, error) {
	p := &dispatcherProcess{dispatching: make(chan struct{}), exited: make(chan struct{}), discarded: -1}
	p.cmd = exec.CommandContext(ctx, binary, "run")
	p.cmd.Env = environ
	p.cmd.Cancel = func() error { return terminate(p.cmd.Process) }
	p.cmd.WaitDelay = 30 * time.Second
	logs, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the dispatcher %s: %w", binary, err)
	}
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(logs)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var rec struct {
				Msg      string `json:"msg"`
				Messages *int64 `json:"messages"`
			}
			_ = json.Unmarshal([]byte(line), &rec)
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			if rec.Msg == discard.ClosedMessage && rec.Messages != nil {
				p.discarded = *rec.Messages
			}
			p.mu.Unlock()
			if rec.Msg == "dispatching" {
				once.Do(func() { close(p.dispatching) })
			}
		}
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM and waits for the dispatcher to finish its shutdown. Just before,
// it reads the process's peak resident set where the system shows it (Linux): the
// rusage of a child is no good for that there, because exec carries the parent's peak
// over into the child's (the process forked from this one, holding the embedded brokers
// and their messages).
func (p *dispatcherProcess) stop() error {
	p.peakRSSKiB = readPeakRSS(p.cmd.Process.Pid)
	if err := terminate(p.cmd.Process); err != nil {
		return fmt.Errorf("bench: stop the dispatcher: %w", err)
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return p.failure("did not stop within a minute of SIGTERM")
	}
	if p.waitErr != nil {
		return p.failure("stopped with " + p.waitErr.Error())
	}
	return nil
}

// kill ends a dispatcher still running (after a failed phase) and waits for it.
func (p *dispatcherProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// failure is an error naming what went wrong with the dispatcher, with its last log lines.
func (p *dispatcherProcess) failure(what string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("bench: the dispatcher process (%s run) %s; its last log lines:\n  %s",
		p.cmd.Path, what, strings.Join(p.tail, "\n  "))
}

func (p *dispatcherProcess) discardTotal() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.discarded
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
