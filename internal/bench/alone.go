package bench

// The database alone as N replicas use it: N processes of the bench's own, each on
// sessions of its own, moving a backlog with the dispatchers' held claims and commits
// and doing nothing else. N `outboxd run` processes cannot drain faster than that on
// the same machine: it is what the database, the operating system's scheduling of N
// processes and their sessions, and N Go runtimes leave, with no dispatcher's work.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/store"
)

// claimerRole is the environment variable that makes the bench's executable one of
// the database-alone claimer processes: it holds the claimerJob as JSON. The name is
// outside the OUTBOXD_ configuration keys, so no user setting takes it by chance.
const claimerRole = "OUTBOXDBENCH_CLAIMER"

// claimerJob is what a claimer process is told: where, which streams, and claims of
// what size, how many at once, acknowledged how.
type claimerJob struct {
	DSN         string   `json:"dsn"`
	Streams     []string `json:"streams"`
	BatchSize   int      `json:"batch_size"`
	Concurrency int      `json:"concurrency"`
	Ordered     bool     `json:"ordered"`
	Ack         string   `json:"ack"`
	// Timeout bounds the claimer's moves, as --timeout bounds each of the bench's phases.
	Timeout time.Duration `json:"timeout"`
	// NATSURL, when set, makes the claimer publish each claim to the bench's JetStream
	// stream before committing it (jetStreamAlone, --alone); KafkaBrokers to the bench's
	// Kafka topic (kafkaAlone).
	NATSURL      string   `json:"nats_url,omitempty"`
	KafkaBrokers []string `json:"kafka_brokers,omitempty"`
}

// claimerDone is a claimer process's one line of result.
type claimerDone struct {
	Moved      int64   `json:"moved"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Err        string  `json:"err,omitempty"`
}

// ExitIfClaimer makes this process a database-alone claimer (runClaimer) and exits, with
// status 1 after an error, when its environment names the role; otherwise it returns at
// once. outboxd-bench's main and the test binaries that may run the replicas mode call it
// first: the bench starts its claimers from its own executable.
func ExitIfClaimer() {
	ran, err := runClaimer(context.Background(), os.Environ(), os.Stdin, os.Stdout)
	if !ran {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "outboxd-bench: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runClaimer runs this process as a database-alone claimer when environ names the role,
// and reports whether it did: it opens its sessions, writes "ready" to stdout, waits for
// a line on stdin, moves rows until a claim from the start finds none, writes its
// claimerDone as JSON, and returns at the next line or the end of stdin, so that its
// sessions stay open until the bench has read the server's CPU.
func runClaimer(ctx context.Context, environ []string, stdin io.Reader, stdout io.Writer) (bool, error) {
	raw := lookupEnv(environ, claimerRole)
	if raw == "" {
		return false, nil
	}
	var job claimerJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		return true, fmt.Errorf("bench claimer: %s: %w", claimerRole, err)
	}
	b := &bench{progress: newProgress(io.Discard, false), streams: job.Streams}
	b.opt.timeout = job.Timeout
	b.opt.set.BatchSize, b.opt.set.Concurrency, b.opt.set.Ordered, b.opt.set.Ack = job.BatchSize, job.Concurrency, job.Ordered, job.Ack
	cfg, err := benchPoolConfig(job.DSN)
	if err != nil {
		return true, fmt.Errorf("bench claimer: %w", err)
	}
	cfg.MaxConns = int32(len(job.Streams)*job.Concurrency + 1)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return true, fmt.Errorf("bench claimer: %w", err)
	}
	defer pool.Close()
	if err := warm(ctx, pool, int(cfg.MaxConns)-1); err != nil {
		return true, fmt.Errorf("bench claimer: %w", err)
	}
	st, err := store.New(pool, benchTable, app.StoreOptions(benchJanitor(b.opt.set))...)
	if err != nil {
		return true, fmt.Errorf("bench claimer: %w", err)
	}
	if job.NATSURL != "" {
		js, err := newJetStreamAlone(job.NATSURL, len(job.Streams)*job.Concurrency, job.BatchSize)
		if err != nil {
			return true, fmt.Errorf("bench claimer: %w", err)
		}
		defer js.close()
		b.between = js.publish
	}
	if len(job.KafkaBrokers) > 0 {
		k, err := newKafkaAlone(job.KafkaBrokers, len(job.Streams)*job.Concurrency, job.BatchSize)
		if err != nil {
			return true, fmt.Errorf("bench claimer: %w", err)
		}
		defer k.close()
		b.between = k.publish
	}
	in := bufio.NewReader(stdin)
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return true, err
	}
	if _, err := in.ReadString('\n'); err != nil {
		return true, fmt.Errorf("bench claimer: no start: %w", err)
	}
	cpu := selfCPUSeconds()
	t, err := b.claimAck(ctx, "claimer", 0, true, []*store.Store{st})
	done := claimerDone{Moved: t.Messages, CPUSeconds: selfCPUSeconds() - cpu}
	if err != nil {
		done.Err = err.Error()
	}
	line, _ := json.Marshal(done)
	if _, werr := fmt.Fprintf(stdout, "%s\n", line); werr != nil {
		return true, errors.Join(err, werr)
	}
	_, _ = in.ReadString('\n')
	return true, err
}

// claimerProcess is one claimer process as the bench sees it.
type claimerProcess struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	errOut *strings.Builder // its standard error, read once it has exited
}

// line reads the claimer's next line of output. When there is none, the claimer has
// ended: the error then carries what it wrote to its standard error.
func (c *claimerProcess) line() (string, error) {
	s, err := c.out.ReadString('\n')
	if err != nil {
		_ = c.cmd.Wait() // its standard error is complete once it has been waited for
		if said := strings.TrimSpace(c.errOut.String()); said != "" {
			err = fmt.Errorf("%w: %s", err, said)
		}
	}
	return strings.TrimSpace(s), err
}

// aloneRun is one run of the database alone in n processes.
type aloneRun struct {
	benchThroughput
	serverCPU   *float64 // nil when the server is not on this machine
	claimersCPU float64
}

// databaseAloneProcesses fills a backlog of --messages rows and moves it with n claimer
// processes (runClaimer) of this executable, each with the concurrency claimers a stream a
// dispatcher would have, started together once every one has opened its sessions. It
// returns the rate from the start to the last one's result, the server's CPU over that
// and the claimers' own.
func (b *bench) databaseAloneProcesses(ctx context.Context, n int) (aloneRun, error) {
	return b.aloneProcesses(ctx, n, "discard")
}

// aloneProcesses is databaseAloneProcesses, with each claim published before its commit
// to the bench's JetStream stream or Kafka topic when driver is jetstream or kafka
// (--alone).
func (b *bench) aloneProcesses(ctx context.Context, n int, driver string) (aloneRun, error) {
	what := "the database"
	var natsURL string
	var kafkaBrokers []string
	switch driver {
	case "jetstream":
		what, natsURL = "the database and JetStream", b.nats.url
	case "kafka":
		what, kafkaBrokers = "the database and Kafka", b.kafka.brokers
	}
	phase := fmt.Sprintf("%s alone, %d processes", what, n)
	if n == 1 {
		phase = what + " alone, 1 process"
	}
	if err := b.fill(ctx, phase, b.opt.set.Messages); err != nil {
		return aloneRun{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return aloneRun{}, fmt.Errorf("bench: %s: %w", phase, err)
	}
	job, err := json.Marshal(claimerJob{DSN: b.opt.dsn, Streams: b.streams,
		BatchSize: b.opt.set.BatchSize, Concurrency: b.opt.set.Concurrency, Ordered: b.opt.set.Ordered, Ack: b.opt.set.Ack,
		Timeout: b.opt.timeout, NATSURL: natsURL, KafkaBrokers: kafkaBrokers})
	if err != nil {
		return aloneRun{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.opt.timeout)
	defer cancel()
	var procs []*claimerProcess
	defer func() {
		for _, p := range procs {
			_ = p.in.Close() // a claimer returns at the end of its stdin
			_ = p.cmd.Wait()
		}
	}()
	for range n {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), claimerRole+"="+string(job))
		errOut := new(strings.Builder) // what a failing claimer says, for the error
		cmd.Stderr = errOut
		in, err := cmd.StdinPipe()
		if err != nil {
			return aloneRun{}, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return aloneRun{}, err
		}
		if err := cmd.Start(); err != nil {
			return aloneRun{}, fmt.Errorf("bench: %s: %w", phase, err)
		}
		procs = append(procs, &claimerProcess{cmd: cmd, in: in, out: bufio.NewReader(out), errOut: errOut})
	}
	for _, p := range procs {
		s, err := p.line()
		if err == nil && s != "ready" {
			err = fmt.Errorf("it said %q", s)
		}
		if err != nil {
			return aloneRun{}, fmt.Errorf("bench: %s: a claimer did not open its sessions: %w", phase, err)
		}
	}
	postmaster, local, err := b.localServer(ctx)
	if err != nil {
		return aloneRun{}, fmt.Errorf("bench: %s: %w", phase, err)
	}
	var before float64
	if local {
		before = serverCPU(postmaster)
	}
	start := time.Now()
	for _, p := range procs {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			return aloneRun{}, fmt.Errorf("bench: %s: %w", phase, err)
		}
	}
	var r aloneRun
	for _, p := range procs {
		s, err := p.line()
		var done claimerDone
		if err == nil {
			err = json.Unmarshal([]byte(s), &done)
		}
		if err == nil && done.Err != "" {
			err = errors.New(done.Err)
		}
		if err != nil {
			return aloneRun{}, fmt.Errorf("bench: %s: a claimer failed: %w", phase, err)
		}
		r.Messages += done.Moved
		r.claimersCPU += done.CPUSeconds
	}
	r.Seconds = time.Since(start).Seconds()
	if local {
		cpu := round(serverCPU(postmaster)-before, 2)
		r.serverCPU = &cpu
	}
	r.claimersCPU = round(r.claimersCPU, 3)
	if r.Messages != int64(b.opt.set.Messages) {
		return r, fmt.Errorf("bench: %s moved %d of %d rows", phase, r.Messages, b.opt.set.Messages)
	}
	r.MsgsPerSec = round(float64(r.Messages)/r.Seconds, 1)
	// The claimers count only at their end: the phase shows its line once it is over.
	b.progress.begin(phase, r.Messages, func() int64 { return r.Messages })
	b.progress.end(fmt.Sprintf("%s msg/s", thousands(r.MsgsPerSec)))
	return r, nil
}

// alone measures driver's limit after its drain when --alone asks (discard, jetstream
// and kafka; nothing for the others): a fresh backlog moved by one claimer process,
// publishing to the bench's JetStream stream or Kafka topic for those drivers.
func (b *bench) alone(ctx context.Context, driver string, d *benchDrain) error {
	if !b.opt.set.Alone || !slices.Contains(aloneDrivers, driver) {
		return nil
	}
	r, err := b.aloneProcesses(ctx, 1, driver)
	if err != nil {
		return err
	}
	d.AloneMsgsPerSec = r.MsgsPerSec
	if r.MsgsPerSec > 0 {
		d.RatioToAlone = round(d.MsgsPerSec/r.MsgsPerSec, 3)
	}
	return nil
}

// aloneDrivers are the drivers whose limit --alone measures.
var aloneDrivers = []string{"discard", "jetstream", "kafka"}

// aloneRatios sets each alone limit's ratio to the discard drain's.
func aloneRatios(drivers map[string]*benchDriverReport) {
	base, ok := drivers["discard"]
	if !ok || base.Drain.AloneMsgsPerSec == 0 {
		return
	}
	for _, d := range drivers {
		if d.Drain.AloneMsgsPerSec > 0 {
			d.Drain.AloneRatioToDiscard = round(d.Drain.AloneMsgsPerSec/base.Drain.AloneMsgsPerSec, 3)
		}
	}
}
