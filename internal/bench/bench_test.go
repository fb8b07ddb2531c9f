package bench

import (
	"context"
	"flag"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/store"
)

// TestMain runs the tests, or a claimer process of the replicas mode when a bench run
// here starts this test binary as one.
func TestMain(m *testing.M) {
	ExitIfClaimer()
	testenv.Main(m)
}

// optionsFrom fills Options from the flags in args that the tests here use, as
// cmd/outboxd-bench's flags would.
func optionsFrom(t *testing.T, args []string, environ ...string) Options {
	t.Helper()
	o := DefaultOptions()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.Ordered, "ordered", o.Ordered, "")
	fs.BoolVar(&o.Flow, "flow", o.Flow, "")
	fs.StringVar(&o.Ack, "ack", o.Ack, "")
	fs.StringVar(&o.Drivers, "drivers", o.Drivers, "")
	fs.IntVar(&o.Streams, "streams", o.Streams, "")
	fs.IntVar(&o.BatchSize, "batch", o.BatchSize, "")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "")
	fs.StringVar(&o.RedisAddr, "redis-addr", o.RedisAddr, "")
	fs.StringVar(&o.RabbitMQURL, "rabbitmq-url", o.RabbitMQURL, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	o.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.Given[f.Name] = true })
	o.Environ, o.Stderr = environ, io.Discard
	return o
}

func TestTallyCountsEachCommittedMessageOnceAndItsCopies(t *testing.T) {
	t.Parallel()
	tl := newTally()
	for _, id := range []string{"1", "2", "2", "2", "9", "not-an-id", ""} {
		tl.add(id)
	}
	arrived, dups := tl.against([]int64{1, 2, 3})
	if arrived != 2 || dups != 2 || tl.count() != 7 {
		t.Fatalf("arrived %d, duplicates %d, total %d; want 2, 2, 7", arrived, dups, tl.count())
	}
}

const benchDoc = "../../docs/benchmarks.md"

// jsonPaths lists the dotted JSON field paths of t; a map's key is written <driver>.
func jsonPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue // encoding/json leaves it out
			}
			if f.Anonymous {
				out = append(out, jsonPaths(f.Type, prefix)...)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			out = append(out, jsonPaths(f.Type, prefix+name+".")...)
		}
		return out
	case reflect.Map:
		return jsonPaths(t.Elem(), prefix+"<driver>.")
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return jsonPaths(t.Elem(), strings.TrimSuffix(prefix, ".")+"[].")
		}
	}
	return []string{strings.TrimSuffix(prefix, ".")}
}

func TestDocsListEveryJSONFieldOfTheBenchAndNoOther(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(benchDoc)
	if err != nil {
		t.Fatalf("read the benchmark docs: %v", err)
	}
	_, section, ok := strings.Cut(string(data), "\n## JSON fields\n")
	if !ok {
		t.Fatalf("%s has no section \"## JSON fields\"", benchDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			key, _, _ := strings.Cut(rest, "`")
			documented[key] = true
		}
	}
	paths := jsonPaths(reflect.TypeFor[benchReport](), "")
	for _, p := range paths {
		if !documented[p] {
			t.Errorf("%s does not document the JSON field %s", benchDoc, p)
		}
	}
	for p := range documented {
		if !slices.Contains(paths, p) {
			t.Errorf("%s documents %s, which bench --json does not print", benchDoc, p)
		}
	}
}

// TestTheDrainsDispatcherRunsWithTheBenchsConfiguration reads the child dispatcher's
// environment back as `outboxd run` would and compares it with the configuration the
// bench meant: a setting left out of the environment would silently measure run's
// default instead (as --ordered once did, draining ordered backlogs unordered).
func TestTheDrainsDispatcherRunsWithTheBenchsConfiguration(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--ordered", "--streams", "3", "--batch", "250", "--concurrency", "5"},
		{"--ack", "delete", "--drivers", "kafka,jetstream", "--flow=false"},
		{"--drivers", "discard,redis", "--redis-addr", "cache.internal:6380"},
		{"--drivers", "rabbitmq,http,postgres", "--rabbitmq-url", "amqp://bench:secret@mq.internal:5672/"},
		{},
	} {
		o, err := resolve(optionsFrom(t, args, "OUTBOXD_DATABASE_URL=postgres://u@db:5432/bench"))
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		o.natsURL, o.kafkaBrokers = "nats://127.0.0.1:4222", []string{"127.0.0.1:9092", "127.0.0.1:9093"}
		for _, d := range o.set.Drivers {
			want, err := benchConfig(o, d)
			if err != nil {
				t.Fatal(err)
			}
			got, err := config.Load("", benchEnviron([]string{"OUTBOXD_STREAMS__LEAK__DRIVER=x", "PATH=/bin"}, want), drivers.All())
			if err != nil {
				t.Fatalf("%v, %s: the child's environment does not load: %v", args, d, err)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("%v, %s: the child would run with\n%+v\nwant\n%+v", args, d, *got, want)
			}
		}
	}
}

// TestBenchCountsOnlyTheDrainedMessagesAsArrivals keeps the --retained rows out of a
// drain's arrival count: they were delivered before the bench began and never arrive,
// so counting against their ids too let extra copies pass for arrivals (and kept the
// core NATS counter waiting for ids that never come).
func TestBenchCountsOnlyTheDrainedMessagesAsArrivals(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const retained, backlog, copies = 50, 20, 2
	b := newTestBench(t)
	b.opt.set.Retained, b.opt.set.Keys, b.payload = retained, 5, []byte("p")
	if err := b.retain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.fill(ctx, "drain discard", backlog); err != nil {
		t.Fatal(err)
	}
	ids, err := b.ids(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The discard driver's total: every drained message once, two of them twice.
	child := &dispatcherProcess{discarded: backlog + copies}
	arrived, duplicates, err := discardCounter{}.count(ctx, ids, child)
	if err != nil {
		t.Fatal(err)
	}
	if arrived != backlog || duplicates != copies {
		t.Errorf("counted %d arrived and %d duplicates against %d ids; want %d arrived (the drained backlog) and %d duplicates",
			arrived, duplicates, len(ids), backlog, copies)
	}
}

// newTestBench is a bench on a migrated database of the test's own, with one stream and
// the dispatcher's default claims, set up as Run sets one up for its phases.
func newTestBench(t *testing.T) *bench {
	t.Helper()
	dsn := testenv.EmptyDatabase(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrations.Up(t.Context(), dsn, benchTable); err != nil {
		t.Fatal(err)
	}
	writer, err := producer.New(benchTable)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, benchTable)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{pool: pool, store: st, writer: writer, payload: []byte("payload"), streams: benchStreams(1),
		progress: newProgress(io.Discard, false)}
	b.opt.dsn, b.opt.timeout = dsn, 2*time.Minute
	b.opt.set.Keys, b.opt.set.BatchSize, b.opt.set.Concurrency, b.opt.set.Ack = 10, 100, 2, benchAckUpdate
	return b
}

func TestAClaimerThatCannotConnectFailsTheRunAndSaysWhy(t *testing.T) {
	t.Parallel()
	b := newTestBench(t)
	b.opt.set.Messages = 100
	b.opt.dsn = "postgres://postgres@127.0.0.1:1/none?connect_timeout=2&sslmode=disable"
	_, err := b.databaseAloneProcesses(t.Context(), 2)
	if err == nil || !strings.Contains(err.Error(), "did not open its sessions") || !strings.Contains(err.Error(), "bench claimer") {
		t.Fatalf("claimers on a database nobody listens for: %v; want the run to fail with what the claimer said", err)
	}
}
