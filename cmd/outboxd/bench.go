package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	jsdrv "github.com/outboxd/outboxd/router/jetstream"
	kafkadrv "github.com/outboxd/outboxd/router/kafka"
	natsdrv "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// outboxd bench measures, in one run, what a dispatcher on this machine and database
// can do: the SQL ceiling of the claim and write-back statements, the drain of a backlog
// through the discard driver and each real driver, commit → confirmation latency, the
// producer's cost and the dispatcher's CPU and memory. docs/benchmarks.md describes
// every figure and the JSON field names.

// benchTable is where the bench writes: a schema of its own, dropped and recreated at
// every start, so a benchmark never touches an application's outbox.
var benchTable = table.Name{Schema: "outboxd_bench", Table: "messages"}

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

// benchDrivers lists the driver types the bench knows, in report order.
var benchDrivers = []string{discard.Type, jsdrv.Type, kafkadrv.Type, natsdrv.Type}

// benchSettings is what one run measured with; --json prints it under "settings".
type benchSettings struct {
	Messages          int      `json:"messages"`
	PayloadBytes      int      `json:"payload_bytes"`
	Keys              int      `json:"keys"`
	Streams           int      `json:"streams"`
	BatchSize         int      `json:"batch_size"`
	BatchSizeFrom     string   `json:"batch_size_from"`
	Concurrency       int      `json:"concurrency"`
	ConcurrencyFrom   string   `json:"concurrency_from"`
	Rate              int      `json:"rate"`
	LatencySeconds    float64  `json:"latency_seconds"`
	IdleSamples       int      `json:"idle_samples"`
	ProducerMessages  int      `json:"producer_messages"`
	Drivers           []string `json:"drivers"`
	NATS              string   `json:"nats"`
	Kafka             string   `json:"kafka"`
	Quick             bool     `json:"quick"`
	DispatcherProcess string   `json:"dispatcher_process"`
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
}

// The write-back modes of --ack.
const (
	benchAckUpdate = "update"
	benchAckDelete = "delete"
)

// benchOptions are the command line, parsed.
type benchOptions struct {
	set          benchSettings
	dsn          string
	natsURL      string
	kafkaBrokers []string
	binary       string
	timeout      time.Duration
	json         bool
}

func parseBenchFlags(e env) (benchOptions, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	def := config.DefaultStream()
	var o benchOptions
	messages := fs.Int("messages", 100000, "backlog size of the SQL ceiling and of each drain")
	payload := fs.Int("payload", 1024, "payload bytes per message")
	keys := fs.Int("keys", 1000, "distinct message keys")
	ordered := fs.Bool("ordered", false, "make the streams ordered (per-key FIFO, docs/ordering.md); --keys 1 is a single hot key")
	retained := fs.Int("retained", 0, "delivered rows kept in the table through every phase (e.g. 10000000)")
	flow := fs.Bool("flow", def.Flow, "let pipelines flow under a high producer rate (streams.<name>.flow); --flow=false keeps every insert notifying")
	ack := fs.String("ack", benchAckUpdate, "write-back of a confirmed message: update (mark delivered, run's default) or delete (as with janitor.retention 0)")
	streams := fs.Int("streams", 1, "streams the backlog is spread over, one pipeline each")
	batch := fs.Int("batch", def.BatchSize, "rows per claim (batch_size); default: what outboxd run uses")
	concurrency := fs.Int("concurrency", def.Concurrency, "batches in flight per stream (concurrency); default: what outboxd run uses")
	rate := fs.Int("rate", 1000, "offered rate of the latency phase, messages/s")
	latencyFor := fs.Duration("latency-duration", 10*time.Second, "how long the offered-rate latency phase runs")
	idle := fs.Int("idle-samples", 500, "messages sent one at a time through an idle pipeline")
	drivers := fs.String("drivers", strings.Join(benchDrivers, ","), "drivers to measure, comma-separated: "+strings.Join(benchDrivers, ", "))
	fs.StringVar(&o.dsn, "database-url", "", "PostgreSQL to measure (default $OUTBOXD_DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres); the bench uses schema "+benchTable.Schema+" only")
	fs.StringVar(&o.natsURL, "nats-url", "", "use this NATS server (JetStream enabled for the jetstream driver) instead of an embedded one")
	kafkaBrokers := fs.String("kafka-brokers", "", "use these Kafka brokers (host:port,...) instead of an embedded Kafka-protocol broker")
	fs.BoolVar(&o.json, "json", false, "print one JSON object with every figure instead of the table, and no progress")
	quick := fs.Bool("quick", false, "small sizes, for tests and CI (flags given explicitly still win)")
	fs.StringVar(&o.binary, "dispatcher-binary", "", "outboxd binary run as the drain's dispatcher process (default: this executable)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on a phase after this long")
	if err := parseFlags(fs, e.args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageError{msg: fmt.Sprintf("bench: unexpected argument %q", fs.Arg(0))}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	producerMessages := 40 * benchProducerBatch
	if *quick {
		for name, small := range map[string]func(){
			"messages":         func() { *messages = 2000 },
			"rate":             func() { *rate = 200 },
			"latency-duration": func() { *latencyFor = time.Second },
			"idle-samples":     func() { *idle = 20 },
		} {
			if !given[name] {
				small()
			}
		}
		producerMessages = 2 * benchProducerBatch
	}
	from := func(name string) string {
		if given[name] {
			return "flag"
		}
		return "default"
	}
	o.set = benchSettings{
		Messages: *messages, PayloadBytes: *payload, Keys: *keys, Streams: *streams,
		BatchSize: *batch, BatchSizeFrom: from("batch"), Concurrency: *concurrency, ConcurrencyFrom: from("concurrency"),
		Rate: *rate, LatencySeconds: latencyFor.Seconds(), IdleSamples: *idle, ProducerMessages: producerMessages,
		Quick: *quick, NATS: "embedded", Kafka: "embedded", Retained: *retained, Ordered: *ordered, Ack: *ack, Flow: *flow,
	}
	switch {
	case *messages < 1 || *keys < 1 || *streams < 1 || *idle < 1 || *rate < 1:
		return o, usageError{msg: "bench: --messages, --keys, --streams, --idle-samples and --rate must be at least 1"}
	case *payload < 0:
		return o, usageError{msg: "bench: --payload must not be negative"}
	case *retained < 0:
		return o, usageError{msg: "bench: --retained must not be negative"}
	case *latencyFor < 100*time.Millisecond || o.timeout <= 0:
		return o, usageError{msg: "bench: --latency-duration must be at least 100ms and --timeout positive"}
	case *streams > 100:
		return o, usageError{msg: "bench: --streams must be at most 100"}
	case *ack != benchAckUpdate && *ack != benchAckDelete:
		return o, usageError{msg: fmt.Sprintf("bench: --ack: unknown write-back %q; want %s or %s", *ack, benchAckUpdate, benchAckDelete)}
	case *ack == benchAckDelete && *retained > 0:
		return o, usageError{msg: "bench: --retained keeps delivered rows, which --ack delete (janitor.retention 0) does not: its janitor would purge them"}
	}
	seen := map[string]bool{}
	for _, d := range strings.Split(*drivers, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(benchDrivers, d) {
			return o, usageError{msg: fmt.Sprintf("bench: --drivers: unknown driver %q; want some of %s", d, strings.Join(benchDrivers, ", "))}
		}
		seen[d] = true
	}
	for _, d := range benchDrivers {
		if seen[d] {
			o.set.Drivers = append(o.set.Drivers, d)
		}
	}
	if *kafkaBrokers != "" {
		for _, b := range strings.Split(*kafkaBrokers, ",") {
			o.kafkaBrokers = append(o.kafkaBrokers, strings.TrimSpace(b))
		}
		o.set.Kafka = strings.Join(o.kafkaBrokers, ",")
	}
	if o.natsURL != "" {
		n := natsdrv.DefaultOptions()
		n.URL = o.natsURL
		o.set.NATS = config.Driver{Type: natsdrv.Type, Options: n}.Redacted().Options.(natsdrv.Options).URL
	}
	if o.dsn == "" {
		o.dsn = lookupEnv(e.environ, "OUTBOXD_DATABASE_URL")
	}
	if o.dsn == "" {
		o.dsn = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	// The dispatcher's settings must validate as run would validate them; check now
	// rather than after the first phases. Embedded brokers get their addresses later.
	probe := o
	if probe.natsURL == "" {
		probe.natsURL = "nats://127.0.0.1:4222"
	}
	if len(probe.kafkaBrokers) == 0 {
		probe.kafkaBrokers = []string{"127.0.0.1:9092"}
	}
	for _, d := range o.set.Drivers {
		if _, err := benchConfig(probe, d); err != nil {
			return o, err
		}
	}
	return o, nil
}

// benchConfig is the configuration the dispatcher of one driver runs with, in this
// process (latency) or as a child (drain, through benchEnviron).
func benchConfig(o benchOptions, driverType string) (config.Config, error) {
	cfg := config.Default()
	cfg.DatabaseURL = o.dsn
	cfg.Schema, cfg.TableName = benchTable.Schema, benchTable.Table
	cfg.ReplicaID = benchReplica
	cfg.HTTP.Addr = "127.0.0.1:0" // metrics on, as run's default, on a port nobody else holds
	cfg.Janitor = benchJanitor(o.set)
	var opts router.Options
	switch driverType {
	case natsdrv.Type:
		n := natsdrv.DefaultOptions()
		n.URL = o.natsURL
		opts = n
	case jsdrv.Type:
		j := jsdrv.DefaultOptions()
		j.URL = o.natsURL
		opts = j
	case kafkadrv.Type:
		k := kafkadrv.DefaultOptions()
		k.Brokers = o.kafkaBrokers
		opts = k
	case discard.Type:
		opts = discard.DefaultOptions()
	}
	cfg.Drivers = map[string]config.Driver{benchDriverName: {Type: driverType, Options: opts}}
	cfg.Streams = map[string]config.Stream{}
	for _, name := range benchStreams(o.set.Streams) {
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
	e        env
	pool     *pgxpool.Pool
	store    *store.Store
	writer   *producer.Writer
	payload  []byte
	streams  []string
	progress *progress
	nats     *benchNATS
	kafka    *benchKafka
	report   benchReport
	// retainedUpTo is the last id of the --retained rows; phases keep ids up to it.
	retainedUpTo int64
}

func benchCmd(ctx context.Context, e env) error {
	opt, err := parseBenchFlags(e)
	if err != nil {
		return err
	}
	b := &bench{opt: opt, e: e, streams: benchStreams(opt.set.Streams), progress: newProgress(e.stderr, !opt.json)}
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
	r.finish()
	if opt.json {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, string(out))
	} else {
		printBenchReport(e.stdout, r)
	}
	if r.Missing > 0 {
		var where []string
		for _, d := range r.Settings.Drivers {
			if m := r.Drivers[d].Drain.Missing; m > 0 {
				where = append(where, fmt.Sprintf("%d through %s", m, d))
			}
		}
		return fmt.Errorf("bench: committed messages missing after the drain: %s", strings.Join(where, ", "))
	}
	return nil
}

// setup finds the dispatcher binary, prepares the bench table and starts or reaches
// the brokers.
func (b *bench) setup(ctx context.Context) error {
	bin, err := dispatcherBinary(b.opt.binary)
	if err != nil {
		return err
	}
	b.opt.binary = bin
	b.report = benchReport{
		Version: version, Date: time.Now().UTC().Format(time.RFC3339), Settings: b.opt.set,
		Drivers: map[string]*benchDriverReport{},
	}
	b.report.Settings.DispatcherProcess = bin

	poolConfig, err := pgxpool.ParseConfig(b.opt.dsn)
	if err != nil {
		return fmt.Errorf("bench: --database-url: %w", err)
	}
	poolConfig.MaxConns = max(poolConfig.MaxConns, int32(b.opt.set.Streams*b.opt.set.Concurrency+benchRateWorkers+4))
	poolConfig.ConnConfig.RuntimeParams["jit"] = "off" // as the dispatcher's pool
	if b.pool, err = pgxpool.NewWithConfig(ctx, poolConfig); err != nil {
		return fmt.Errorf("bench: connect to database: %w", err)
	}
	redacted := config.RedactDSN(b.opt.dsn)
	if _, err := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+table.Quote(benchTable.Schema)+" CASCADE"); err != nil {
		return fmt.Errorf("bench: connect to database %s: %w", redacted, err)
	}
	if err := migrations.Up(ctx, b.opt.dsn, benchTable); err != nil {
		return fmt.Errorf("bench: create %s: %w", benchTable, err)
	}
	// The SQL ceiling acknowledges as the dispatchers will.
	if b.store, err = store.New(b.pool, benchTable, storeOptions(benchJanitor(b.opt.set))...); err != nil {
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
	return nil
}

// dispatcherBinary is the outboxd executable the drain runs as its dispatcher. A test
// binary is refused: run again, it would run the tests instead of outboxd.
func dispatcherBinary(flagValue string) (string, error) {
	if flagValue != "" {
		if _, err := os.Stat(flagValue); err != nil {
			return "", fmt.Errorf("bench: --dispatcher-binary: %w", err)
		}
		return flagValue, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("bench: find this executable to run the dispatcher: %w (use --dispatcher-binary)", err)
	}
	if strings.HasSuffix(filepath.Base(self), ".test") {
		return "", errors.New("bench: this is a test binary; build outboxd and pass it with --dispatcher-binary")
	}
	return self, nil
}

// measure runs every phase, in an order that keeps each one's conditions alike: the
// table is emptied before each, and every drain starts from the same fresh backlog.
func (b *bench) measure(ctx context.Context) error {
	r := &b.report
	var err error
	if r.Producer, err = b.producerCost(ctx); err != nil {
		return err
	}
	if r.SQLCeiling, err = b.sqlCeiling(ctx); err != nil {
		return err
	}
	for _, d := range b.opt.set.Drivers {
		r.Drivers[d] = &benchDriverReport{}
		if r.Drivers[d].Drain, err = b.drain(ctx, d); err != nil {
			return err
		}
	}
	for _, d := range b.opt.set.Drivers {
		if err := b.latency(ctx, d, r.Drivers[d]); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) close() {
	b.progress.stop()
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
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", s.name).Scan(s.to); err != nil {
			return m, fmt.Errorf("bench: read %s: %w", s.name, err)
		}
	}
	return m, nil
}
