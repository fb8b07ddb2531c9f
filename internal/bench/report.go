package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
)

// benchReport is one run's result; --json prints exactly these fields, whose names
// docs/benchmarks.md documents and a test holds to it.
// Report is what bench --json prints (docs/benchmarks.md lists its fields).
type Report = benchReport

type benchReport struct {
	Version    string                        `json:"version"`
	Date       string                        `json:"date"`
	Seconds    float64                       `json:"seconds"`
	Settings   benchSettings                 `json:"settings"`
	Machine    benchMachineInfo              `json:"machine"`
	Producer   benchProducer                 `json:"producer"`
	SQLCeiling benchThroughput               `json:"sql_ceiling"`
	Drivers    map[string]*benchDriverReport `json:"drivers"`
	// ReadyMs is exec → ready of the drains' dispatchers, median over the run's drains.
	ReadyMs benchReady `json:"ready_ms"`
	// The A/B comparison and the scale modes, each present when asked for.
	AB          *benchAB          `json:"ab,omitempty"`
	Replicas    []benchReplicaRun `json:"replicas,omitempty"`
	ManyStreams *benchManyStreams `json:"many_streams,omitempty"`
	Payloads    []benchPayloadRun `json:"payloads,omitempty"`
	Backlog     *benchBacklog     `json:"backlog,omitempty"`
	Missing     int64             `json:"missing"`
	OK          bool              `json:"ok"`
}

type benchMachineInfo struct {
	CPUs              int    `json:"cpus"`
	OS                string `json:"os"`
	Go                string `json:"go"`
	PostgreSQL        string `json:"postgresql"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	SharedBuffers     string `json:"shared_buffers"`
}

type benchProducer struct {
	Messages             int     `json:"messages"`
	BatchSize            int     `json:"batch_size"`
	EnqueueUsPerMsg      float64 `json:"enqueue_us_per_msg"`
	EnqueueBatchUsPerMsg float64 `json:"enqueue_batch_us_per_msg"`
	CopyUsPerMsg         float64 `json:"copy_us_per_msg"`
	BatchToCopy          float64 `json:"enqueue_batch_to_copy"`
}

type benchThroughput struct {
	Messages   int64   `json:"messages"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
}

type benchDrain struct {
	Messages             int64   `json:"messages"`
	Seconds              float64 `json:"seconds"`
	MsgsPerSec           float64 `json:"msgs_per_sec"`
	RatioToSQLCeiling    float64 `json:"ratio_to_sql_ceiling"`
	RatioToDiscard       float64 `json:"ratio_to_discard,omitempty"`
	DeliveredInTable     int64   `json:"delivered_in_table"`
	ArrivedAtBroker      int64   `json:"arrived_at_broker"`
	DuplicatesAtBroker   int64   `json:"duplicates_at_broker"`
	Missing              int64   `json:"missing"`
	CountedBy            string  `json:"counted_by"`
	DispatcherCPUSeconds float64 `json:"dispatcher_cpu_seconds"`
	DispatcherPeakRSSMiB float64 `json:"dispatcher_peak_rss_mib"`
	// The same dispatcher idle on an empty table before the drain (idleRSS).
	DispatcherIdleRSSMiB  float64 `json:"dispatcher_idle_rss_mib"`
	DispatcherIdleAnonMiB float64 `json:"dispatcher_idle_anon_mib"`
	DispatcherIdleFileMiB float64 `json:"dispatcher_idle_file_mib"`
	ReadyDispatchingMs    float64 `json:"ready_dispatching_ms"`
	ReadyzMs              float64 `json:"ready_readyz_ms"`
	// Where the machine's CPU went while the drain ran (cpuShares).
	DatabaseCPUSeconds *float64 `json:"database_cpu_seconds"`
	BenchCPUSeconds    float64  `json:"bench_cpu_seconds"`
	CPUBusy            float64  `json:"cpu_busy,omitempty"`
	CPUUsPerMsg        float64  `json:"cpu_us_per_msg,omitempty"`
	CPURatioToDiscard  float64  `json:"cpu_ratio_to_discard,omitempty"`
	// BrokerBoundRatioToDiscard is the best ratio_to_discard the machine's CPUs allow
	// with this destination's own work, where the bench's process does it (inBench).
	BrokerBoundRatioToDiscard float64 `json:"broker_bound_ratio_to_discard,omitempty"`
	destInBench               bool    // the destination works in the bench's process
	// With --alone (discard, jetstream and kafka): the rate of one claimer process moving
	// the same backlog with only the drain's claims and commits (and, for jetstream and
	// kafka, the least publish of each row), the drain's rate ÷ it, and it ÷ the discard
	// drain's: the best ratio_to_discard measured on this machine.
	AloneMsgsPerSec     float64 `json:"alone_msgs_per_sec,omitempty"`
	RatioToAlone        float64 `json:"ratio_to_alone,omitempty"`
	AloneRatioToDiscard float64 `json:"alone_ratio_to_discard,omitempty"`
}

// cpuShares records the CPU the drain of moved messages cost while it ran (in, two
// cpuMarks apart): the database server's, the bench process's own (its embedded
// brokers and the consumer that counts arrivals) and the dispatchers'. With all three
// known (a local server, Linux), CPUBusy is their sum over CPUs × the drain's seconds,
// near 1 when the drain kept the whole machine busy, and CPUUsPerMsg their sum per
// message: what a message cost the machine, whichever process spent it.
func (d *benchDrain) cpuShares(in cpuMark, moved int64) {
	d.BenchCPUSeconds = round(in.self, 3)
	if !in.local {
		return
	}
	server := round(in.server, 2)
	d.DatabaseCPUSeconds = &server
	if !in.dispatchersKnown || d.Seconds <= 0 || moved <= 0 {
		return
	}
	total := in.server + in.self + in.dispatchers
	d.CPUBusy = round(total/(float64(runtime.NumCPU())*d.Seconds), 2)
	d.CPUUsPerMsg = round(total/float64(moved)*1e6, 1)
}

type benchLatency struct {
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P90Ms   float64 `json:"p90_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

type benchRateLatency struct {
	OfferedPerSec  float64 `json:"offered_per_sec"`
	AchievedPerSec float64 `json:"achieved_per_sec"`
	benchLatency
}

type benchDriverReport struct {
	Drain         benchDrain       `json:"drain"`
	LatencyAtRate benchRateLatency `json:"latency_at_rate"`
	LatencyIdle   benchLatency     `json:"latency_idle"`
}

// benchReady is exec → ready of a drain's dispatcher process: its "dispatching" log
// line, and its /readyz first answering 200 (asked every millisecond). The floors are
// the same of outboxd-floor and outboxd-floor-linked, started before each idle start
// (floorStarts).
type benchReady struct {
	Drains                   int     `json:"drains"`
	DispatchingMs            float64 `json:"dispatching"`
	ReadyzMs                 float64 `json:"readyz"`
	FloorStarts              int     `json:"floor_starts"`
	FloorDispatchingMs       float64 `json:"floor_dispatching"`
	FloorReadyzMs            float64 `json:"floor_readyz"`
	DispatchingToFloor       float64 `json:"dispatching_to_floor"`
	ReadyzToFloor            float64 `json:"readyz_to_floor"`
	FloorLinkedStarts        int     `json:"floor_linked_starts"`
	FloorLinkedDispatchingMs float64 `json:"floor_linked_dispatching"`
	FloorLinkedReadyzMs      float64 `json:"floor_linked_readyz"`
	DispatchingToFloorLinked float64 `json:"dispatching_to_floor_linked"`
	ReadyzToFloorLinked      float64 `json:"readyz_to_floor_linked"`
	// floorMissing and floorLinkedMissing are where each floor program was looked
	// for and not found ("" when found).
	floorMissing, floorLinkedMissing string
}

func readyFigures(drains [][2]float64) benchReady {
	var disp, readyz []float64
	for _, d := range drains {
		if d[0] > 0 {
			disp = append(disp, d[0])
		}
		if d[1] > 0 {
			readyz = append(readyz, d[1])
		}
	}
	return benchReady{Drains: len(drains), DispatchingMs: median(disp), ReadyzMs: median(readyz)}
}

// brokerBound is the ratio to the discard drain that d's drain would show if the
// dispatcher and the database spent on it no more than on the discard drain, and the
// machine's CPUs bounded both: each message costs the machine the discard drain's CPU
// plus what the destination itself spent over the bench process's own in the discard
// drain. 0 when it cannot be told: no discard drain, CPU figures missing, or a
// destination outside the bench's process, whose work no figure here holds.
func brokerBound(discard, d *benchDriverReport) float64 {
	if discard == nil || !d.Drain.destInBench || discard.Drain.CPUUsPerMsg <= 0 || d.Drain.CPUUsPerMsg <= 0 || d.Drain.Messages <= 0 {
		return 0
	}
	own := max(d.Drain.BenchCPUSeconds-discard.Drain.BenchCPUSeconds, 0) / float64(d.Drain.Messages) * 1e6
	return round(discard.Drain.CPUUsPerMsg/(discard.Drain.CPUUsPerMsg+own), 3)
}

// finish computes the ratios and the verdict; missingIn holds the drains' missing
// messages outside Drivers.
func (r *benchReport) finish(missingIn map[string]int64) {
	discard := r.Drivers["discard"]
	r.Missing = 0
	for _, d := range r.Drivers {
		if r.SQLCeiling.MsgsPerSec > 0 {
			d.Drain.RatioToSQLCeiling = round(d.Drain.MsgsPerSec/r.SQLCeiling.MsgsPerSec, 3)
		}
		if discard != nil && discard.Drain.MsgsPerSec > 0 {
			d.Drain.RatioToDiscard = round(d.Drain.MsgsPerSec/discard.Drain.MsgsPerSec, 3)
		}
		if discard != nil && d.Drain.CPUUsPerMsg > 0 {
			// What ratio_to_discard would be if both drains could only go as fast as
			// the machine's CPUs let them.
			d.Drain.CPURatioToDiscard = round(discard.Drain.CPUUsPerMsg/d.Drain.CPUUsPerMsg, 3)
		}
		d.Drain.BrokerBoundRatioToDiscard = brokerBound(discard, d)
		r.Missing += d.Drain.Missing
	}
	for _, n := range missingIn {
		r.Missing += n
	}
	r.OK = r.Missing == 0
}

func round(f float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(f*p) / p
}

// latencyFigures summarises commit → confirmation durations.
func latencyFigures(lat []time.Duration) benchLatency {
	slices.Sort(lat)
	l := benchLatency{Samples: len(lat)}
	if len(lat) == 0 {
		return l
	}
	l.P50Ms, l.P90Ms, l.P99Ms = PercentileMs(lat, 0.50), PercentileMs(lat, 0.90), PercentileMs(lat, 0.99)
	l.MaxMs = float64(lat[len(lat)-1].Microseconds()) / 1000
	return l
}

func printBenchReport(w io.Writer, r *benchReport) {
	s, m := r.Settings, r.Machine
	from := func(f string) string {
		if f == "default" {
			return "outboxd run's default"
		}
		return "set by flag"
	}
	fmt.Fprintf(w, "outboxd bench %s, %s\n\n", r.Version, r.Date)
	fmt.Fprintf(w, "machine    %d CPUs, %s, %s; PostgreSQL %s, fsync %s, synchronous_commit %s, shared_buffers %s\n",
		m.CPUs, m.OS, m.Go, m.PostgreSQL, m.Fsync, m.SynchronousCommit, m.SharedBuffers)
	fmt.Fprintf(w, "backlog    %s messages × %s B payload, %s keys, %d stream(s)\n",
		thousands(float64(s.Messages)), thousands(float64(s.PayloadBytes)), thousands(float64(s.Keys)), s.Streams)
	fmt.Fprintf(w, "pipelines  batch_size %d (%s), concurrency %d (%s)\n", s.BatchSize, from(s.BatchSizeFrom), s.Concurrency, from(s.ConcurrencyFrom))
	if s.Ordered {
		fmt.Fprintf(w, "ordered    yes: per-key FIFO over %d keys\n", s.Keys)
	}
	if !s.Flow {
		fmt.Fprintln(w, "flow       off: every insert notifies")
	}
	fmt.Fprintf(w, "brokers    NATS %s, Kafka %s\n\n", s.NATS, s.Kafka)

	if len(r.Drivers) == 0 {
		printScale(w, r)
		return
	}
	claim := "store.Claim"
	if s.Ordered {
		claim = "store.ClaimOrdered"
	}
	ack := "marks delivered"
	if s.Ack == benchAckDelete {
		ack = "deletes"
	}
	fmt.Fprintf(w, "SQL ceiling (%s + store.Ack, which %s; %d goroutines, no broker)  %s msg/s\n",
		claim, ack, s.Streams*s.Concurrency, thousands(r.SQLCeiling.MsgsPerSec))
	fmt.Fprintf(w, "producer    Enqueue %.1f µs/msg (%d per transaction), EnqueueBatch of %d (COPY) %.1f µs/msg\n",
		r.Producer.EnqueueUsPerMsg, r.Producer.BatchSize, r.Producer.BatchSize, r.Producer.EnqueueBatchUsPerMsg)
	fmt.Fprintf(w, "            bare pgx CopyFrom of the same rows %.1f µs/msg; EnqueueBatch ÷ CopyFrom %.2f (interleaved)\n",
		r.Producer.CopyUsPerMsg, r.Producer.BatchToCopy)
	printReady(w, "ready       ", r.ReadyMs)
	fmt.Fprintln(w)

	const label = "%-34s"
	fmt.Fprintf(w, label, "")
	for _, d := range s.Drivers {
		fmt.Fprintf(w, "%12s", d)
	}
	fmt.Fprintln(w)
	row := func(name string, value func(*benchDriverReport) string) {
		fmt.Fprintf(w, label, name)
		for _, d := range s.Drivers {
			fmt.Fprintf(w, "%12s", value(r.Drivers[d]))
		}
		fmt.Fprintln(w)
	}
	ratio := func(f float64) string {
		if f == 0 {
			return "—"
		}
		return strconv.FormatFloat(f, 'f', 2, 64)
	}
	ms := func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
	count := func(n int64) string { return thousands(float64(n)) }
	row("drain msg/s", func(d *benchDriverReport) string { return thousands(d.Drain.MsgsPerSec) })
	row("  ÷ SQL ceiling", func(d *benchDriverReport) string { return ratio(d.Drain.RatioToSQLCeiling) })
	row("  ÷ discard", func(d *benchDriverReport) string { return ratio(d.Drain.RatioToDiscard) })
	row("  delivered in table", func(d *benchDriverReport) string { return count(d.Drain.DeliveredInTable) })
	row("  arrived at broker", func(d *benchDriverReport) string { return count(d.Drain.ArrivedAtBroker) })
	row("  missing", func(d *benchDriverReport) string { return count(d.Drain.Missing) })
	row("  dispatcher CPU s", func(d *benchDriverReport) string {
		return strconv.FormatFloat(d.Drain.DispatcherCPUSeconds, 'f', 2, 64)
	})
	row("  CPU busy (all processes ÷ CPUs)", func(d *benchDriverReport) string { return ratio(d.Drain.CPUBusy) })
	row("  CPU µs/msg (dispatcher+db+bench)", func(d *benchDriverReport) string {
		if d.Drain.CPUUsPerMsg == 0 {
			return "—"
		}
		return strconv.FormatFloat(d.Drain.CPUUsPerMsg, 'f', 1, 64)
	})
	row("  CPU-bound ÷ discard", func(d *benchDriverReport) string { return ratio(d.Drain.CPURatioToDiscard) })
	row("  best with its broker ÷ discard", func(d *benchDriverReport) string { return ratio(d.Drain.BrokerBoundRatioToDiscard) })
	if r.Settings.Alone {
		row("  alone msg/s (its limit, --alone)", func(d *benchDriverReport) string {
			if d.Drain.AloneMsgsPerSec == 0 {
				return "—"
			}
			return thousands(d.Drain.AloneMsgsPerSec)
		})
		row("  drain ÷ alone", func(d *benchDriverReport) string { return ratio(d.Drain.RatioToAlone) })
		row("  alone ÷ discard's alone", func(d *benchDriverReport) string { return ratio(d.Drain.AloneRatioToDiscard) })
	}
	row("  dispatcher peak RSS MiB", func(d *benchDriverReport) string {
		return strconv.FormatFloat(d.Drain.DispatcherPeakRSSMiB, 'f', 1, 64)
	})
	row("  dispatcher idle RSS MiB", func(d *benchDriverReport) string {
		return strconv.FormatFloat(d.Drain.DispatcherIdleRSSMiB, 'f', 1, 64)
	})
	rateTitle := fmt.Sprintf("latency at %s msg/s", thousands(float64(s.Rate)))
	row(rateTitle+" p50 ms", func(d *benchDriverReport) string { return ms(d.LatencyAtRate.P50Ms) })
	row(strings.Repeat(" ", len(rateTitle))+" p90 ms", func(d *benchDriverReport) string { return ms(d.LatencyAtRate.P90Ms) })
	row(strings.Repeat(" ", len(rateTitle))+" p99 ms", func(d *benchDriverReport) string { return ms(d.LatencyAtRate.P99Ms) })
	row(strings.Repeat(" ", len(rateTitle))+" max ms", func(d *benchDriverReport) string { return ms(d.LatencyAtRate.MaxMs) })
	const idleTitle = "latency idle, one at a time"
	row(idleTitle+" p50 ms", func(d *benchDriverReport) string { return ms(d.LatencyIdle.P50Ms) })
	row(strings.Repeat(" ", len(idleTitle))+" p90 ms", func(d *benchDriverReport) string { return ms(d.LatencyIdle.P90Ms) })
	row(strings.Repeat(" ", len(idleTitle))+" p99 ms", func(d *benchDriverReport) string { return ms(d.LatencyIdle.P99Ms) })
	row(strings.Repeat(" ", len(idleTitle))+" max ms", func(d *benchDriverReport) string { return ms(d.LatencyIdle.MaxMs) })
	row("  exec → /readyz 200 ms", func(d *benchDriverReport) string { return ms(d.Drain.ReadyzMs) })
	fmt.Fprintf(w, "\nlatency: commit sent → the driver's Publish returned nil for the message.\n")
	fmt.Fprintf(w, "drain: a fresh backlog through `outboxd run` as a child process, whose CPU and peak RSS are shown.\n")
	printAB(w, r.AB)
	printVerdict(w, r)
}

func printVerdict(w io.Writer, r *benchReport) {
	if r.OK {
		fmt.Fprintf(w, "every committed message arrived (%.0fs in all)\n", r.Seconds)
	} else {
		fmt.Fprintf(w, "MISSING: %d committed messages did not arrive\n", r.Missing)
	}
}

// thousands formats f rounded to an integer with thousands separators.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// progress shows the running phase on one terminal line: what it does, how far it is
// and its rate. Each finished phase leaves one line behind; when w is not a terminal,
// only those lines are written.
type progress struct {
	w       io.Writer
	on      bool
	animate bool
	mu      sync.Mutex
	quit    chan struct{}
	ended   chan struct{}
	phase   string
}

func newProgress(w io.Writer, on bool) *progress {
	return &progress{w: w, on: on, animate: on && ops.IsTerminal(w)}
}

// begin shows phase until end or stop; done reports how many of total are done.
func (p *progress) begin(phase string, total int64, done func() int64) {
	p.stop()
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = phase
	if !p.animate {
		return
	}
	p.quit, p.ended = make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func(quit, ended chan struct{}) {
		defer close(ended)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				n, elapsed := done(), time.Since(start)
				fmt.Fprintf(p.w, "\r\033[K%s  %s/%s  %s msg/s  %.1fs", phase, thousands(float64(n)), thousands(float64(total)),
					thousands(float64(n)/elapsed.Seconds()), elapsed.Seconds())
			}
		}
	}(p.quit, p.ended)
}

// end stops the display and leaves summary on the phase's line.
func (p *progress) end(summary string) {
	phase := p.phase
	p.stop()
	if p.on && phase != "" {
		fmt.Fprintf(p.w, "%s: %s\n", phase, summary)
	}
}

// stop stops the display and clears its line.
func (p *progress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = ""
	if p.quit == nil {
		return
	}
	close(p.quit)
	<-p.ended
	p.quit = nil
	fmt.Fprint(p.w, "\r\033[K")
}

// PercentileMs is the q-quantile of sorted latencies, in milliseconds; 0 for none.
func PercentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1))].Microseconds()) / 1000
}
