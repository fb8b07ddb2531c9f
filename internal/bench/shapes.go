package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/store"
)

// The shapes of scale users meet, each a mode of its own: many configured streams
// (--many-streams), big payloads (--payloads) and a large pending backlog (--backlog).

// benchBusyStreams is how many of --many-streams's streams receive messages.
const benchBusyStreams = 2

// benchManyStreams is the many-streams mode: per configured stream count, the idle
// dispatcher's cost, and the busy streams' latency against those streams configured
// alone.
type benchManyStreams struct {
	Driver      string            `json:"driver"`
	BusyStreams int               `json:"busy_streams"`
	BusyAlone   benchRateLatency  `json:"busy_alone"`
	Runs        []benchStreamsRun `json:"runs"`
}

type benchStreamsRun struct {
	Streams int `json:"streams"`
	// The dispatcher process with every stream idle, over --idle-window.
	IdleCPUPercent         float64 `json:"idle_cpu_percent"`
	IdleConnections        int     `json:"idle_connections"`
	IdleTransactionsPerSec float64 `json:"idle_transactions_per_sec"`
	IdlePeakRSSMiB         float64 `json:"idle_peak_rss_mib"`
	ReadyzMs               float64 `json:"ready_readyz_ms"`
	// Busy is commit → confirmation on the busy streams at --rate, the others idle.
	Busy     benchRateLatency `json:"busy"`
	RatioP50 float64          `json:"ratio_p50"`
	RatioP99 float64          `json:"ratio_p99"`
	// BusyError is why the busy streams could not be measured, if they could not.
	BusyError string `json:"busy_error,omitempty"`
}

// manyStreams runs the many-streams mode with the first of --drivers.
func (b *bench) manyStreams(ctx context.Context) (*benchManyStreams, error) {
	driver := b.opt.set.Drivers[0]
	r := &benchManyStreams{Driver: driver, BusyStreams: benchBusyStreams}
	busy := benchStreams(benchBusyStreams)
	var err error
	if r.BusyAlone, err = b.busyLatency(ctx, driver, busy, "busy streams alone"); err != nil {
		return nil, err
	}
	for _, n := range b.opt.set.ManyStreams {
		run := benchStreamsRun{Streams: n}
		if err := b.idleCost(ctx, driver, benchStreams(n), &run); err != nil {
			return nil, err
		}
		// A dispatcher that cannot run this many streams on this server (its sessions
		// refused) is a finding, not a reason to lose the idle figures.
		if run.Busy, err = b.busyLatency(ctx, driver, benchStreams(n), fmt.Sprintf("busy streams among %d", n)); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			run.BusyError = err.Error()
		}
		if run.BusyError == "" && r.BusyAlone.P50Ms > 0 && r.BusyAlone.P99Ms > 0 {
			run.RatioP50 = round(run.Busy.P50Ms/r.BusyAlone.P50Ms, 3)
			run.RatioP99 = round(run.Busy.P99Ms/r.BusyAlone.P99Ms, 3)
		}
		r.Runs = append(r.Runs, run)
	}
	return r, nil
}

// idleCost runs `outboxd run` with streams configured and none of them sent to, and
// reads over --idle-window, after a second to settle: its CPU, its sessions and the
// database's transactions per second.
func (b *bench) idleCost(ctx context.Context, driver string, streams []string, run *benchStreamsRun) error {
	if err := b.empty(ctx); err != nil {
		return err
	}
	cfg, err := benchConfigStreams(b.opt, driver, streams)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	child, err := startDispatcher(ctx, b.opt.binary, benchEnviron(b.o.Environ, cfg))
	if err != nil {
		return err
	}
	defer child.kill()
	phase := fmt.Sprintf("idle dispatcher, %d streams", len(streams))
	b.progress.begin(phase, 1, func() int64 { return 0 })
	select {
	case <-child.ready:
	case <-child.exited:
		return child.failure("exited before it was ready")
	case <-time.After(60 * time.Second):
		return child.failure("was not ready within 60s")
	}
	time.Sleep(time.Second)
	window := time.Duration(b.opt.set.IdleWindowSeconds * float64(time.Second))
	cpu0, tx0 := child.cpuNow(), int64(0)
	if tx0, err = store.BenchTransactions(ctx, b.pool); err != nil {
		return err
	}
	start := time.Now()
	time.Sleep(window)
	cpu1 := child.cpuNow()
	tx1, err := store.BenchTransactions(ctx, b.pool)
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	if run.IdleConnections, err = store.BenchConnections(ctx, b.pool, benchApplication); err != nil {
		return err
	}
	if cpu0 >= 0 && cpu1 >= 0 {
		run.IdleCPUPercent = round(100*(cpu1-cpu0)/elapsed, 2)
	}
	// The bench's own two readings are transactions too.
	run.IdleTransactionsPerSec = round(float64(max(tx1-tx0-2, 0))/elapsed, 1)
	if err := child.stop(); err != nil {
		return err
	}
	_, run.IdlePeakRSSMiB = child.usage()
	run.IdlePeakRSSMiB = round(run.IdlePeakRSSMiB, 1)
	_, run.ReadyzMs = child.readiness()
	b.progress.end(fmt.Sprintf("%.2f %% of a core, %d connections, %.1f transactions/s", run.IdleCPUPercent,
		run.IdleConnections, run.IdleTransactionsPerSec))
	return nil
}

// busyLatency runs an in-process dispatcher of streams and measures commit →
// confirmation at --rate for --latency-duration on the first benchBusyStreams of them.
func (b *bench) busyLatency(ctx context.Context, driver string, streams []string, label string) (l benchRateLatency, err error) {
	if err := b.empty(ctx); err != nil {
		return l, err
	}
	cfg, err := benchConfigStreams(b.opt, driver, streams)
	if err != nil {
		return l, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	// The producers' connections first: a dispatcher of many streams may take what
	// the server has left, and its latency is what is measured, not the bench's.
	if err := b.warmPool(ctx, benchRateWorkers+1); err != nil {
		return l, err
	}
	conf, stop, err := b.inProcess(ctx, cfg, label)
	if err != nil {
		return l, err
	}
	defer func() {
		if stopErr := stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	msg := func(i int) producer.Message {
		m := b.message(i)
		m.Stream = streams[i%benchBusyStreams]
		return m
	}
	return b.atRate(ctx, conf, label, float64(b.opt.set.Rate), b.opt.set.LatencySeconds, msg)
}

// warmPool opens n of the bench's connections ahead of a phase, and keeps them idle.
func (b *bench) warmPool(ctx context.Context, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("bench: connect: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// benchPayloadRun is one drain of big payloads.
type benchPayloadRun struct {
	Driver       string  `json:"driver"`
	PayloadBytes int     `json:"payload_bytes"`
	Messages     int64   `json:"messages"`
	MsgsPerSec   float64 `json:"msgs_per_sec"`
	MBPerSec     float64 `json:"mb_per_sec"`
	PeakRSSMiB   float64 `json:"dispatcher_peak_rss_mib"`
	CPUSeconds   float64 `json:"dispatcher_cpu_seconds"`
	// Failed counts messages the driver refused for good (above the broker's size
	// limit): their rows are failed, not delivered, and none arrived.
	Failed  int64 `json:"failed"`
	Missing int64 `json:"missing"`
}

// benchPayloadBytes bounds the bytes of one big-payload backlog: its message count is
// --messages or this many bytes' worth, whichever is less (and at least 50).
const benchPayloadBytes = 256 << 20

// payloads drains a backlog of each --payloads size through each driver.
func (b *bench) payloads(ctx context.Context) ([]benchPayloadRun, error) {
	saved := b.payload
	defer func() { b.payload = saved }()
	var out []benchPayloadRun
	for _, size := range b.opt.set.Payloads {
		b.payload = make([]byte, size)
		_, _ = rand.Read(b.payload)
		n := min(b.opt.set.Messages, max(50, benchPayloadBytes/size))
		for _, driver := range b.opt.set.Drivers {
			d, err := b.drainWith(ctx, drainSpec{driver: driver, messages: n, failedAllowed: true})
			if err != nil {
				return out, fmt.Errorf("%w (payload %d B)", err, size)
			}
			b.noteMissing(fmt.Sprintf("%s with %d B payloads", driver, size), d.Missing)
			out = append(out, benchPayloadRun{Driver: driver, PayloadBytes: size, Messages: d.Messages, MsgsPerSec: d.MsgsPerSec,
				MBPerSec: round(d.MsgsPerSec*float64(size)/1e6, 2), PeakRSSMiB: d.DispatcherPeakRSSMiB,
				CPUSeconds: d.DispatcherCPUSeconds, Failed: d.failed, Missing: d.Missing})
		}
	}
	return out, nil
}

// benchBacklog is the large-backlog mode: the drain rate over the first
// --backlog-sample messages of --backlog pending rows against the same over a
// --messages backlog, and the time from exec to the first message out. Beside each,
// the SQL ceiling of that backlog over as many rows: whether the database's claim and
// acknowledgement or the dispatcher loses the rate on the large one.
type benchBacklog struct {
	Driver       string          `json:"driver"`
	Large        benchBacklogRun `json:"large"`
	Small        benchBacklogRun `json:"small"`
	RatioToSmall float64         `json:"ratio_to_small"`
	// SQLCeilingRatioToSmall is the large backlog's SQL ceiling over the small one's:
	// the share of its rate the database keeps.
	SQLCeilingRatioToSmall float64 `json:"sql_ceiling_ratio_to_small"`
}

type benchBacklogRun struct {
	Pending     int64   `json:"pending"`
	FillSeconds float64 `json:"fill_seconds"`
	// SQLCeilingMsgsPerSec is claimAck over the sample's first rows of the table
	// (see backlog), and RatioToSQLCeiling the drain's MsgsPerSec over it.
	SQLCeilingMsgsPerSec float64 `json:"sql_ceiling_msgs_per_sec"`
	Measured             int64   `json:"measured"`
	MsgsPerSec           float64 `json:"msgs_per_sec"`
	RatioToSQLCeiling    float64 `json:"ratio_to_sql_ceiling"`
	FirstOutMs           float64 `json:"first_out_ms"`
	Missing              int64   `json:"missing"`
}

// benchBigFillTx is how many rows the large backlog writes per transaction (COPY).
const benchBigFillTx = 50000

// backlog runs the large-backlog mode with the first of --drivers.
//
// Per backlog of pending rows, with sample the lesser of --backlog-sample and pending,
// the table is filled once with pending + sample rows (10^7 take minutes to write, so
// not once per measurement) and checkpointed. The SQL ceiling moves the first sample
// of them; VACUUM ANALYZE then clears the index entries it left dead, as after the
// fill, and a checkpoint flushes its writes; and the
// dispatcher starts on exactly pending rows, measured over its first sample. So both
// see the table as the fill left it, vacuumed, with as many pending rows within
// sample, and read adjacent rows at its head; the dispatcher's own figure is the one
// this mode gave before the ceiling was added. The ceiling goes first because it leaves
// nothing leased and knows how many rows it delivered, which the drain's counts leave
// out; a dispatcher stopped by SIGTERM part way could leave leases behind.
func (b *bench) backlog(ctx context.Context) (*benchBacklog, error) {
	driver := b.opt.set.Drivers[0]
	r := &benchBacklog{Driver: driver}
	run := func(pending int) (benchBacklogRun, error) {
		sample := min(pending, b.opt.set.BacklogSample)
		phase := "backlog of " + thousands(float64(pending))
		started := time.Now()
		if err := b.fillTx(ctx, phase, pending+sample, benchBigFillTx); err != nil {
			return benchBacklogRun{}, err
		}
		fill := time.Since(started).Seconds()
		// 10^7 rows dirty gigabytes: flushed by a checkpoint now, not by one that
		// falls on the ceiling or the drain (the fill's own VACUUM has run; this one
		// finds nothing to do). The same after the ceiling's writes.
		if err := b.store.BenchVacuum(ctx, true); err != nil {
			return benchBacklogRun{}, fmt.Errorf("bench: %s: %w", phase, err)
		}
		// The ceiling claims as the drain's dispatcher does: held in a transaction,
		// the default claim mode, unless the streams are ordered.
		ceiling, err := b.claimAck(ctx, phase+": SQL ceiling", sample, true, []*store.Store{b.store})
		if err != nil {
			return benchBacklogRun{}, err
		}
		if err := b.store.BenchVacuum(ctx, true); err != nil {
			return benchBacklogRun{}, fmt.Errorf("bench: %s: %w", phase, err)
		}
		d, err := b.drainWith(ctx, drainSpec{driver: driver, messages: pending + sample, filled: true,
			delivered: ceiling.Messages,
			until:     func(published float64, _ time.Duration) bool { return published >= float64(sample) }})
		if err != nil {
			return benchBacklogRun{}, err
		}
		b.noteMissing(driver+" "+phase, d.Missing)
		x := benchBacklogRun{Pending: int64(pending), FillSeconds: round(fill, 1), Measured: d.published,
			MsgsPerSec: d.MsgsPerSec, FirstOutMs: d.firstOutMs, Missing: d.Missing}
		x.SQLCeilingMsgsPerSec = ceiling.MsgsPerSec
		x.RatioToSQLCeiling = ratioOf(x.MsgsPerSec, x.SQLCeilingMsgsPerSec)
		return x, nil
	}
	var err error
	if r.Small, err = run(b.opt.set.Messages); err != nil {
		return nil, err
	}
	if r.Large, err = run(b.opt.set.Backlog); err != nil {
		return nil, err
	}
	r.RatioToSmall = ratioOf(r.Large.MsgsPerSec, r.Small.MsgsPerSec)
	r.SQLCeilingRatioToSmall = ratioOf(r.Large.SQLCeilingMsgsPerSec, r.Small.SQLCeilingMsgsPerSec)
	return r, nil
}

// ratioOf is x ÷ y to three places, 0 when y is.
func ratioOf(x, y float64) float64 {
	if y == 0 {
		return 0
	}
	return round(x/y, 3)
}
