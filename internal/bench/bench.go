package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	jsdrv "github.com/outboxd/outboxd/router/jetstream"
	kafkadrv "github.com/outboxd/outboxd/router/kafka"
	natsdrv "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// benchTable is where the bench writes: a schema of its own, dropped and recreated at
// every start, so a benchmark never touches an application's outbox.
var benchTable = table.Name{Schema: Schema, Table: "messages"}

// Schema is the only schema the bench writes to; Table is its table there.
const Schema = "outboxd_bench"

var Table = benchTable

const (
	benchTopic      = "events"         // every row's topic
	benchPrefix     = "outboxd-bench." // every stream's topic prefix: the destination is outboxd-bench.events
	benchDriverName = "bench"
	benchReplica    = "outboxd-bench"
	// benchJetStream is the JetStream stream capturing benchPrefix+">"; the bench deletes
	// and recreates it, on an embedded server and on a real one alike.
	benchJetStream = "OUTBOXD_BENCH"
	// benchPartitions is the partition count of the Kafka topic the bench creates.
	benchPartitions = 8
	// benchFillTx is how many messages the backlog fill writes per transaction (COPY).
	benchFillTx = 5000
	// benchProducerBatch is the batch of the producer-cost phase (the target).
	benchProducerBatch = 500
	// benchRateWorkers commit the offered-rate latency messages, each in its own
	// transaction, so that a slow commit does not hold back the schedule.
	benchRateWorkers = 16
)

// benchSettings is what one run measured with; --json prints it under "settings".
type benchSettings struct {
	Messages         int      `json:"messages"`
	PayloadBytes     int      `json:"payload_bytes"`
	Keys             int      `json:"keys"`
	Streams          int      `json:"streams"`
	BatchSize        int      `json:"batch_size"`
	BatchSizeFrom    string   `json:"batch_size_from"`
	Concurrency      int      `json:"concurrency"`
	ConcurrencyFrom  string   `json:"concurrency_from"`
	Rate             int      `json:"rate"`
	LatencySeconds   float64  `json:"latency_seconds"`
	IdleSamples      int      `json:"idle_samples"`
	ProducerMessages int      `json:"producer_messages"`
	Drivers          []string `json:"drivers"`
	NATS             string   `json:"nats"`
	Kafka            string   `json:"kafka"`
	// Destinations describes, per driver type, a destination the bench set up itself
	// (benchDest.setup): where it was, as the report may show it.
	Destinations      map[string]string `json:"destinations,omitempty"`
	Quick             bool              `json:"quick"`
	DispatcherProcess string            `json:"dispatcher_process"`
	// Retained delivered rows kept in the table through every phase, to show that
	// claim cost does not grow with the delivered rows a deployment keeps.
	Retained int `json:"retained"`
	// Ordered makes every stream ordered (per-key FIFO): the SQL ceiling uses the
	// ordered claim and the dispatcher runs with streams.<name>.ordered.
	Ordered bool `json:"ordered"`
	// Ack is the write-back of a confirmed message, in the SQL ceiling and every
	// dispatcher alike: benchAckUpdate marks it delivered (run's default, with delivered
	// rows retained), benchAckDelete deletes it (janitor.retention 0).
	Ack string `json:"ack"`
	// Flow is every stream's streams.<name>.flow (--flow): whether its pipeline may
	// flow, polling every millisecond while producers stop notifying.
	Flow bool `json:"flow"`
	// Alone (--alone): after the discard, jetstream and kafka drains, the same backlog
	// moved by a claimer process doing only what such a drain must (alone_jetstream.go,
	// alone_kafka.go).
	Alone bool `json:"alone"`
	// BaselineBinary is the A dispatcher of --baseline-binary; Rounds its A/B pairs.
	BaselineBinary string `json:"baseline_binary,omitempty"`
	Rounds         int    `json:"rounds"`
	// The scale modes asked for: replica counts, configured stream counts, payload
	// sizes, and the large backlog's pending rows and measured messages.
	Replicas          []int   `json:"replicas,omitempty"`
	ManyStreams       []int   `json:"many_streams,omitempty"`
	IdleWindowSeconds float64 `json:"idle_window_seconds"`
	Payloads          []int   `json:"payloads,omitempty"`
	Backlog           int     `json:"backlog,omitempty"`
	BacklogSample     int     `json:"backlog_sample"`
}

// The write-back modes of --ack.
const (
	benchAckUpdate = "update"
	benchAckDelete = "delete"
)

// benchConfig is the configuration the dispatcher of one driver runs with, in this
// process (latency) or as a child (drain, through benchEnviron).
func benchConfig(o benchOptions, driverType string) (config.Config, error) {
	return benchConfigStreams(o, driverType, benchStreams(o.set.Streams))
}

// benchConfigStreams is benchConfig with the streams names.
func benchConfigStreams(o benchOptions, driverType string, names []string) (config.Config, error) {
	cfg := config.Default()
	cfg.DatabaseURL = withApplicationName(o.dsn, benchApplication)
	cfg.Schema, cfg.TableName = benchTable.Schema, benchTable.Table
	cfg.ReplicaID = benchReplica
	cfg.HTTP.Addr = "127.0.0.1:0" // metrics on, as run's default, on a port nobody else holds
	cfg.Janitor = benchJanitor(o.set)
	dest, err := destOf(driverType)
	if err != nil {
		return cfg, err
	}
	opts := dest.options(o)
	cfg.Drivers = map[string]config.Driver{benchDriverName: {Type: driverType, Options: opts}}
	cfg.Streams = map[string]config.Stream{}
	for _, name := range names {
		s := config.DefaultStream()
		s.Driver, s.TopicPrefix = benchDriverName, benchPrefix
		s.BatchSize, s.Concurrency, s.Ordered, s.Flow = o.set.BatchSize, o.set.Concurrency, o.set.Ordered, o.set.Flow
		cfg.Streams[name] = s
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("bench: %w", err)
	}
	return cfg, nil
}

// benchJanitor is run's janitor, with retention 0 (acknowledging by DELETE) for --ack delete.
func benchJanitor(s benchSettings) config.Janitor {
	j := config.Default().Janitor
	if s.Ack == benchAckDelete {
		j.Retention = 0
	}
	return j
}

// benchApplication is the application_name of the dispatchers' sessions the bench
// starts, by which it counts them in pg_stat_activity.
const benchApplication = "outboxd_bench_dispatcher"

// withApplicationName sets application_name in dsn (a URL or key=value pairs) unless
// it sets one already.
func withApplicationName(dsn, name string) string {
	if strings.Contains(dsn, "application_name") {
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return strings.TrimSpace(dsn + " application_name=" + name)
}

func benchStreams(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench_%d", i+1)
	}
	return names
}

// bench is one run: its database, brokers and report.
type bench struct {
	opt      benchOptions
	o        Options
	pool     *pgxpool.Pool
	store    *store.Store
	writer   *producer.Writer
	payload  []byte
	streams  []string
	progress *progress
	nats     *benchNATS
	kafka    *benchKafka
	web      *httpSink // the http destination's endpoint, once set up
	report   benchReport
	closers  []func() // the destinations' own, in setup order
	// retainedUpTo is the last id of the --retained rows; phases keep ids up to it.
	retainedUpTo int64
	// readiness holds every drain's first dispatcher's exec → ready, in ms.
	readiness [][2]float64
	// floor and floorLinked are outboxd-floor and outboxd-floor-linked beside the
	// dispatcher binary, with their starts' exec → ready.
	floor, floorLinked floor
	// missingIn counts the missing messages of the drains outside r.Drivers (A/B
	// baselines, the scale modes), by where they went missing.
	missingIn map[string]int64
	// between, when set, is called by claimAck with each claim before its
	// acknowledgement (the --alone claimer's publish).
	between func(ctx context.Context, worker int, c store.Claim) error
}

// noteMissing records a drain's missing messages outside the per-driver drains.
func (b *bench) noteMissing(where string, n int64) {
	if n == 0 {
		return
	}
	if b.missingIn == nil {
		b.missingIn = map[string]int64{}
	}
	b.missingIn[where] += n
}

// Run is outboxd bench: it measures every phase and prints the report, failing when a
// committed message is missing after a drain. Mistakes in o fail as OptionError before
// anything is touched.
func Run(ctx context.Context, o Options) error {
	opt, err := resolve(o)
	if err != nil {
		return err
	}
	e := o
	b := &bench{opt: opt, o: o, streams: benchStreams(opt.set.Streams), progress: newProgress(e.Stderr, !opt.json)}
	defer b.close()
	started := time.Now()
	if err := b.setup(ctx); err != nil {
		return err
	}
	if err := b.measure(ctx); err != nil {
		return err
	}
	r := &b.report
	r.Seconds = time.Since(started).Seconds()
	r.ReadyMs = readyFigures(b.readiness).withFloors(b.floor, b.floorLinked)
	r.finish(b.missingIn)
	if opt.json {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(e.Stdout, string(out))
	} else {
		printBenchReport(e.Stdout, r)
	}
	if r.Missing > 0 {
		var where []string
		for _, d := range r.Settings.Drivers {
			if dr := r.Drivers[d]; dr != nil && dr.Drain.Missing > 0 {
				where = append(where, fmt.Sprintf("%d through %s", dr.Drain.Missing, d))
			}
		}
		for _, w := range slices.Sorted(maps.Keys(b.missingIn)) {
			where = append(where, fmt.Sprintf("%d through %s", b.missingIn[w], w))
		}
		return fmt.Errorf("bench: committed messages missing after the drain: %s", strings.Join(where, ", "))
	}
	return nil
}

// setup finds the dispatcher binary, prepares the bench table and starts or reaches
// the brokers.
func (b *bench) setup(ctx context.Context) error {
	bin, err := dispatcherBinary(b.opt.binary, os.Executable)
	if err != nil {
		return err
	}
	b.opt.binary = bin
	b.floor, b.floorLinked = floorBeside(bin, floorProgram), floorBeside(bin, floorLinkedProgram)
	if base := b.opt.set.BaselineBinary; base != "" {
		if _, err := os.Stat(base); err != nil {
			return fmt.Errorf("bench: --baseline-binary: %w", err)
		}
	}
	b.report = benchReport{
		Version: b.o.Version, Date: time.Now().UTC().Format(time.RFC3339), Settings: b.opt.set,
		Drivers: map[string]*benchDriverReport{},
	}
	b.report.Settings.DispatcherProcess = bin

	poolConfig, err := benchPoolConfig(b.opt.dsn)
	if err != nil {
		return fmt.Errorf("bench: --database-url: %w", err)
	}
	poolConfig.MaxConns = max(poolConfig.MaxConns, int32(b.opt.set.Streams*b.opt.set.Concurrency+benchRateWorkers+4))
	if b.pool, err = pgxpool.NewWithConfig(ctx, poolConfig); err != nil {
		return fmt.Errorf("bench: connect to database: %w", err)
	}
	redacted := config.RedactDSN(b.opt.dsn)
	if err := store.DropSchema(ctx, b.pool, benchTable.Schema); err != nil {
		return fmt.Errorf("bench: connect to database %s: %w", redacted, err)
	}
	if err := migrations.Up(ctx, b.opt.dsn, benchTable); err != nil {
		return fmt.Errorf("bench: create %s: %w", benchTable, err)
	}
	// The SQL ceiling acknowledges as the dispatchers will.
	if b.store, err = store.New(b.pool, benchTable, app.StoreOptions(benchJanitor(b.opt.set))...); err != nil {
		return err
	}
	if b.writer, err = producer.New(benchTable); err != nil {
		return err
	}
	b.payload = make([]byte, b.opt.set.PayloadBytes)
	_, _ = rand.Read(b.payload) // incompressible, as most real payloads are once TOASTed
	if err := b.retain(ctx); err != nil {
		return err
	}
	if b.report.Machine, err = benchMachine(ctx, b.pool); err != nil {
		return err
	}
	needs := func(types ...string) bool {
		for _, t := range types {
			if slices.Contains(b.opt.set.Drivers, t) {
				return true
			}
		}
		return false
	}
	if !needs(natsdrv.Type, jsdrv.Type) {
		b.report.Settings.NATS = "none"
	}
	if !needs(kafkadrv.Type) {
		b.report.Settings.Kafka = "none"
	}
	if needs(natsdrv.Type, jsdrv.Type) {
		if b.nats, err = startBenchNATS(ctx, b.opt.natsURL, needs(jsdrv.Type)); err != nil {
			return err
		}
		b.opt.natsURL = b.nats.url
	}
	if needs(kafkadrv.Type) {
		if b.kafka, err = startBenchKafka(ctx, b.opt.kafkaBrokers); err != nil {
			return err
		}
		b.opt.kafkaBrokers = b.kafka.brokers
	}
	b.opt.addrs = map[string]string{}
	for _, typ := range b.opt.set.Drivers {
		dest, err := destOf(typ)
		if err != nil {
			return err
		}
		if dest.setup == nil {
			continue
		}
		addr, describe, closer, err := dest.setup(ctx, b)
		if err != nil {
			return err
		}
		if closer != nil {
			b.closers = append(b.closers, closer)
		}
		b.opt.addrs[typ] = addr
		if b.report.Settings.Destinations == nil {
			b.report.Settings.Destinations = map[string]string{}
		}
		b.report.Settings.Destinations[typ] = describe
	}
	return nil
}

// dispatcherBinary is the outboxd executable the drain runs as its dispatcher: the one
// --dispatcher-binary names, else the outboxd beside this executable (outboxd-bench,
// which has no run verb; executable is os.Executable), symbolic links resolved. A test
// binary is refused: beside it there is no outboxd, and run again it would run the tests.
func dispatcherBinary(flagValue string, executable func() (string, error)) (string, error) {
	if flagValue != "" {
		if _, err := os.Stat(flagValue); err != nil {
			return "", fmt.Errorf("bench: --dispatcher-binary: %w", err)
		}
		return flagValue, nil
	}
	self, err := executable()
	if err != nil {
		return "", fmt.Errorf("bench: find this executable, beside which outboxd is looked for: %w (use --dispatcher-binary)", err)
	}
	if strings.HasSuffix(filepath.Base(self), ".test") {
		return "", errors.New("bench: this is a test binary; build outboxd and pass it with --dispatcher-binary")
	}
	bin, err := cli.Beside(self, "outboxd")
	if err != nil {
		return "", fmt.Errorf("bench: no outboxd beside this executable to run as the drains' dispatcher (%w): "+
			"build outboxd beside it (make build builds both) or pass --dispatcher-binary", err)
	}
	return bin, nil
}

// measure runs every phase, in an order that keeps each one's conditions alike: the
// table is emptied before each, and every drain starts from the same fresh backlog.
func (b *bench) measure(ctx context.Context) error {
	r := &b.report
	s := b.opt.set
	var err error
	if len(s.Replicas) > 0 || len(s.ManyStreams) > 0 || len(s.Payloads) > 0 || s.Backlog > 0 {
		return b.measureScale(ctx)
	}
	if r.Producer, err = b.producerCost(ctx); err != nil {
		return err
	}
	if r.SQLCeiling, err = b.sqlCeiling(ctx); err != nil {
		return err
	}
	for _, d := range s.Drivers {
		r.Drivers[d] = &benchDriverReport{}
		if s.BaselineBinary != "" {
			if r.AB == nil {
				r.AB = &benchAB{Baseline: s.BaselineBinary, Current: b.opt.binary, Rounds: s.Rounds, Drivers: map[string]*benchABDriver{}}
			}
			if r.AB.Drivers[d], r.Drivers[d].Drain, err = b.abDrains(ctx, d); err != nil {
				return err
			}
		} else if r.Drivers[d].Drain, err = b.drain(ctx, d); err != nil {
			return err
		}
		if err := b.alone(ctx, d, &r.Drivers[d].Drain); err != nil {
			return err
		}
	}
	aloneRatios(r.Drivers)
	for _, d := range s.Drivers {
		if err := b.latency(ctx, d, r.Drivers[d]); err != nil {
			return err
		}
	}
	return nil
}

// measureScale runs the scale modes asked for, and only them.
func (b *bench) measureScale(ctx context.Context) error {
	r := &b.report
	s := b.opt.set
	var err error
	if len(s.Replicas) > 0 {
		if r.Replicas, err = b.replicas(ctx); err != nil {
			return err
		}
	}
	if len(s.ManyStreams) > 0 {
		if r.ManyStreams, err = b.manyStreams(ctx); err != nil {
			return err
		}
	}
	if len(s.Payloads) > 0 {
		if r.Payloads, err = b.payloads(ctx); err != nil {
			return err
		}
	}
	if s.Backlog > 0 {
		if r.Backlog, err = b.backlog(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) close() {
	b.progress.stop()
	for _, c := range slices.Backward(b.closers) {
		c()
	}
	if b.kafka != nil {
		b.kafka.close()
	}
	if b.nats != nil {
		b.nats.close()
	}
	if b.pool != nil {
		b.pool.Close()
	}
}

// benchMachine describes where the figures were taken.
func benchMachine(ctx context.Context, pool *pgxpool.Pool) (benchMachineInfo, error) {
	m := benchMachineInfo{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	for _, s := range []struct {
		name string
		to   *string
	}{
		{"server_version", &m.PostgreSQL}, {"fsync", &m.Fsync}, {"synchronous_commit", &m.SynchronousCommit},
		{"shared_buffers", &m.SharedBuffers},
	} {
		v, err := store.ServerSetting(ctx, pool, s.name)
		if err != nil {
			return m, fmt.Errorf("bench: %w", err)
		}
		*s.to = v
	}
	return m, nil
}
