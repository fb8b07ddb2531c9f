package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Options are outboxd bench's command line, as cmd/outboxd-bench's flags fill them; each
// field's flag is named in its comment. DefaultOptions gives every default.
type Options struct {
	Messages        int           // --messages: backlog size of the SQL ceiling and of each drain
	PayloadBytes    int           // --payload
	Keys            int           // --keys: distinct message keys
	Ordered         bool          // --ordered: every stream ordered (per-key FIFO)
	Retained        int           // --retained: delivered rows kept through every phase
	Flow            bool          // --flow: streams.<name>.flow of every stream
	Alone           bool          // --alone: the discard, jetstream and kafka drains' limits, measured
	Ack             string        // --ack: AckUpdate or AckDelete
	Streams         int           // --streams: streams the backlog is spread over
	BatchSize       int           // --batch
	Concurrency     int           // --concurrency
	Rate            int           // --rate: offered rate of the latency phase, messages/s
	LatencyDuration time.Duration // --latency-duration
	IdleSamples     int           // --idle-samples
	Drivers         string        // --drivers: comma-separated driver types
	DatabaseURL     string        // --database-url ("": $OUTBOXD_DATABASE_URL, then a local default)
	NATSURL         string        // --nats-url ("": an embedded server)
	KafkaBrokers    string        // --kafka-brokers, host:port,... ("": an embedded broker)
	RedisAddr       string        // --redis-addr: the Redis server of the redis driver, host:port
	RabbitMQURL     string        // --rabbitmq-url ("": DefaultRabbitMQURL)
	JSON            bool          // --json
	Quick           bool          // --quick: small sizes where the flag was not given
	Binary          string        // --dispatcher-binary ("": the outboxd beside this executable)
	Timeout         time.Duration // --timeout: give up on a phase after this long

	// A/B and the scale modes (scale.go, shapes.go); each runs only when its flag is given.
	BaselineBinary string        // --baseline-binary: A/B drains against this outboxd
	Rounds         int           // --rounds: A/B pairs per driver
	Replicas       string        // --replicas: e.g. "1,2,4" dispatcher processes on one table
	ManyStreams    string        // --many-streams: e.g. "100,1000" configured streams, mostly idle
	IdleWindow     time.Duration // --idle-window: how long the idle dispatcher is watched
	Payloads       string        // --payloads: e.g. "64KiB,256KiB,1MiB"
	Backlog        int           // --backlog: pending rows of the large-backlog mode (0: off)
	BacklogSample  int           // --backlog-sample: messages over which its drain rate is measured

	// Given names the flags given on the command line: --quick leaves those alone, and
	// the report says where the batch size and concurrency came from.
	Given map[string]bool
	// Environ is the process environment: OUTBOXD_DATABASE_URL, and what the drain's
	// dispatcher process inherits (every OUTBOXD_ variable left out).
	Environ        []string
	Version        string // the build version, in the report
	Stdout, Stderr io.Writer
}

// The write-back modes of --ack.
const (
	AckUpdate = benchAckUpdate
	AckDelete = benchAckDelete
)

// DriverTypes lists the driver types the bench knows, in report order.
func DriverTypes() []string { return slices.Clone(benchDrivers) }

// DefaultDriverTypes lists the driver types measured when --drivers is not given: those
// whose destination the bench can start or reach on a bare machine.
func DefaultDriverTypes() []string { return defaultDrivers() }

// DefaultOptions are the bench's defaults: run's batch size, concurrency and flow, every
// driver, embedded brokers.
func DefaultOptions() Options {
	def := config.DefaultStream()
	return Options{
		Messages: 100000, PayloadBytes: 1024, Keys: 1000, Flow: def.Flow, Ack: benchAckUpdate, Streams: 1,
		BatchSize: def.BatchSize, Concurrency: def.Concurrency, Rate: 1000, LatencyDuration: 10 * time.Second,
		IdleSamples: 500, Drivers: strings.Join(defaultDrivers(), ","), Timeout: 10 * time.Minute,
		RedisAddr: DefaultRedisAddr, Rounds: 3, IdleWindow: 5 * time.Second, BacklogSample: 100000,
	}
}

// OptionError is a mistake in the options, as a command line's usage error.
type OptionError string

func (e OptionError) Error() string { return string(e) }

// benchOptions are the options resolved: --quick applied, drivers and DSN checked.
type benchOptions struct {
	set          benchSettings
	dsn          string
	natsURL      string
	kafkaBrokers []string
	// addrs holds, per driver type, the address its destination's setup returned.
	addrs map[string]string
	// raw is the command line as given, for destinations' own flags.
	raw     Options
	binary  string
	timeout time.Duration
	json    bool
}

// resolve checks o, mistakes as OptionError, and applies --quick and the defaults. The
// dispatcher's settings must validate as run would validate them; they are checked
// here rather than after the first phases.
func resolve(o Options) (benchOptions, error) {
	r := benchOptions{dsn: o.DatabaseURL, natsURL: o.NATSURL, binary: o.Binary, timeout: o.Timeout, json: o.JSON, raw: o}
	producerMessages := 40 * benchProducerBatch
	if o.Quick {
		for name, small := range map[string]func(){
			"messages":         func() { o.Messages = 2000 },
			"rate":             func() { o.Rate = 200 },
			"latency-duration": func() { o.LatencyDuration = time.Second },
			"idle-samples":     func() { o.IdleSamples = 20 },
			"idle-window":      func() { o.IdleWindow = time.Second },
			"backlog-sample":   func() { o.BacklogSample = 1000 },
		} {
			if !o.Given[name] {
				small()
			}
		}
		producerMessages = 2 * benchProducerBatch
	}
	from := func(name string) string {
		if o.Given[name] {
			return "flag"
		}
		return "default"
	}
	r.set = benchSettings{
		Messages: o.Messages, PayloadBytes: o.PayloadBytes, Keys: o.Keys, Streams: o.Streams,
		BatchSize: o.BatchSize, BatchSizeFrom: from("batch"), Concurrency: o.Concurrency, ConcurrencyFrom: from("concurrency"),
		Rate: o.Rate, LatencySeconds: o.LatencyDuration.Seconds(), IdleSamples: o.IdleSamples, ProducerMessages: producerMessages,
		Quick: o.Quick, NATS: "embedded", Kafka: "embedded", Retained: o.Retained, Ordered: o.Ordered, Ack: o.Ack, Flow: o.Flow, Alone: o.Alone,
		BaselineBinary: o.BaselineBinary, Rounds: o.Rounds, IdleWindowSeconds: o.IdleWindow.Seconds(),
		Backlog: o.Backlog, BacklogSample: o.BacklogSample,
	}
	var err error
	if r.set.Replicas, err = intList("replicas", o.Replicas, 1, 16, 1); err != nil {
		return r, err
	}
	if r.set.ManyStreams, err = intList("many-streams", o.ManyStreams, benchBusyStreams+1, 5000, 1); err != nil {
		return r, err
	}
	if r.set.Payloads, err = intList("payloads", o.Payloads, 1, 16<<20, 0); err != nil {
		return r, err
	}
	switch {
	case o.Rounds < 1:
		return r, OptionError("bench: --rounds must be at least 1")
	case o.Backlog < 0 || o.BacklogSample < 1:
		return r, OptionError("bench: --backlog must not be negative and --backlog-sample must be at least 1")
	case o.IdleWindow < 100*time.Millisecond:
		return r, OptionError("bench: --idle-window must be at least 100ms")
	case o.BaselineBinary != "" && (len(r.set.Replicas) > 0 || len(r.set.ManyStreams) > 0 || len(r.set.Payloads) > 0 || o.Backlog > 0):
		return r, OptionError("bench: --baseline-binary compares the default drains; it does not combine with a scale mode")
	case o.Alone && (len(r.set.Replicas) > 0 || len(r.set.ManyStreams) > 0 || len(r.set.Payloads) > 0 || o.Backlog > 0):
		return r, OptionError("bench: --alone measures beside the default drains; it does not combine with a scale mode")
	}
	switch {
	case o.Messages < 1 || o.Keys < 1 || o.Streams < 1 || o.IdleSamples < 1 || o.Rate < 1:
		return r, OptionError("bench: --messages, --keys, --streams, --idle-samples and --rate must be at least 1")
	case o.PayloadBytes < 0:
		return r, OptionError("bench: --payload must not be negative")
	case o.Retained < 0:
		return r, OptionError("bench: --retained must not be negative")
	case o.LatencyDuration < 100*time.Millisecond || o.Timeout <= 0:
		return r, OptionError("bench: --latency-duration must be at least 100ms and --timeout positive")
	case o.Streams > 100:
		return r, OptionError("bench: --streams must be at most 100")
	case o.Ack != benchAckUpdate && o.Ack != benchAckDelete:
		return r, OptionError(fmt.Sprintf("bench: --ack: unknown write-back %q; want %s or %s", o.Ack, benchAckUpdate, benchAckDelete))
	case o.Ack == benchAckDelete && o.Retained > 0:
		return r, OptionError("bench: --retained keeps delivered rows, which --ack delete (janitor.retention 0) does not: its janitor would purge them")
	}
	seen := map[string]bool{}
	for _, d := range strings.Split(o.Drivers, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(benchDrivers, d) {
			return r, OptionError(fmt.Sprintf("bench: --drivers: unknown driver %q; want some of %s", d, strings.Join(benchDrivers, ", ")))
		}
		seen[d] = true
	}
	for _, d := range benchDrivers {
		if seen[d] {
			r.set.Drivers = append(r.set.Drivers, d)
		}
	}
	if o.KafkaBrokers != "" {
		for _, b := range strings.Split(o.KafkaBrokers, ",") {
			r.kafkaBrokers = append(r.kafkaBrokers, strings.TrimSpace(b))
		}
		r.set.Kafka = strings.Join(r.kafkaBrokers, ",")
	}
	if r.natsURL != "" {
		r.set.NATS = driveropt.RedactURL(r.natsURL, driveropt.Mask, true)
	}
	if r.dsn == "" {
		r.dsn = lookupEnv(o.Environ, "OUTBOXD_DATABASE_URL")
	}
	if r.dsn == "" {
		r.dsn = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	// Embedded brokers get their addresses later.
	probe := r
	if probe.natsURL == "" {
		probe.natsURL = "nats://127.0.0.1:4222"
	}
	if len(probe.kafkaBrokers) == 0 {
		probe.kafkaBrokers = []string{"127.0.0.1:9092"}
	}
	for _, d := range r.set.Drivers {
		if _, err := benchConfig(probe, d); err != nil {
			return r, err
		}
	}
	return r, nil
}

// intList parses a comma-separated list of flag name's values between lo and hi. With
// unit 0 each value may end in B, KiB or MiB (sizes); with unit 1 it is a plain count.
func intList(name, list string, lo, hi, unit int) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		if unit == 0 {
			for _, u := range []struct {
				suffix string
				mult   int
			}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"B", 1}} {
				if rest, ok := strings.CutSuffix(f, u.suffix); ok {
					f, mult = rest, u.mult
					break
				}
			}
		}
		n, err := strconv.Atoi(f)
		if err != nil || n*mult < lo || n*mult > hi {
			return nil, OptionError(fmt.Sprintf("bench: --%s: %q is not a whole number from %d to %d", name, f, lo, hi))
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func lookupEnv(environ []string, key string) string {
	for _, kv := range environ {
		if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
			return kv[len(key)+1:]
		}
	}
	return ""
}

// ErrNotEmbedded is what starting an embedded broker reports in a build with the
// noembed tag.
var ErrNotEmbedded = errors.New("this outboxd-bench was built with -tags noembed, without the embedded NATS server " +
	"and Kafka-protocol broker")
