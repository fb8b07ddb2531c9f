package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/table"
)

func TestLoadWithNothingGivesTheDocumentedDefaults(t *testing.T) {
	t.Parallel()
	cfg := mustLoad(t, "")
	if !reflect.DeepEqual(*cfg, Default()) {
		t.Errorf("Load(\"\", nil) = %+v, want Default() %+v", *cfg, Default())
	}
	checks := []struct {
		key       string
		got, want any
	}{
		{"database_url", cfg.DatabaseURL, "postgres://127.0.0.1:5432/postgres"},
		{"table", cfg.Table(), table.Name{Schema: "outbox", Table: "messages"}},
		{"log.level", cfg.Log.Level, "info"},
		{"log.format", cfg.Log.Format, "json"},
		{"janitor.interval", cfg.Janitor.Interval, 30 * time.Second},
		{"janitor.reclaim_batch", cfg.Janitor.ReclaimBatch, 1000},
		{"janitor.retention", cfg.Janitor.Retention, 24 * time.Hour},
		{"janitor.purge_batch", cfg.Janitor.PurgeBatch, 5000},
		{"janitor.partitions.enabled", cfg.Janitor.Partitions.Enabled, false},
		{"janitor.partitions.interval", cfg.Janitor.Partitions.Interval, 24 * time.Hour},
		{"janitor.partitions.ahead", cfg.Janitor.Partitions.Ahead, 3},
		{"http.addr", cfg.HTTP.Addr, "127.0.0.1:9600"},
		{"http.admin_token", cfg.HTTP.AdminToken, Secret("")},
		{"http.read_token", cfg.HTTP.ReadToken, Secret("")},
		{"tracing.enabled", cfg.Tracing.Enabled, false},
		{"tracing.sample_ratio", cfg.Tracing.SampleRatio, 1.0},
		{"tracing.service_name", cfg.Tracing.ServiceName, "outboxd"},
		{"streams", len(cfg.Streams), 0},
		{"drivers", len(cfg.Drivers), 0},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.key, c.got, c.want)
		}
	}
	host, _ := os.Hostname()
	if want := "-" + strconv.Itoa(os.Getpid()); !strings.HasSuffix(cfg.ReplicaID, want) || !strings.HasPrefix(host, strings.TrimSuffix(cfg.ReplicaID, want)) {
		t.Errorf("replica_id = %q, want hostname %q, '-', pid", cfg.ReplicaID, host)
	}
}

func TestDefaultStreamAndDriversCarryTheDocumentedDefaults(t *testing.T) {
	t.Parallel()
	s := DefaultStream()
	want := Stream{BatchSize: 100, Concurrency: 2, PollInterval: time.Second, LeaseTTL: 30 * time.Second,
		PublishTimeout: 10 * time.Second, BackoffInitial: time.Second, BackoffMax: 5 * time.Minute, MaxAttempts: 10, Flow: true, FlowRate: 500,
		Format: FormatRaw, Claim: ClaimAuto}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("DefaultStream() = %+v, want %+v", s, want)
	}
	k := kafkaDriver(nil).Options.(kafka.Options)
	if k.ClientID != "outboxd" || k.Compression != "none" || k.WriteTimeout != 10*time.Second {
		t.Errorf("kafka.DefaultOptions() = %+v", k)
	}
	js := jetstreamDriver(nil).Options.(jetstream.Options)
	if js.PublishTimeout != 5*time.Second || js.MaxInFlight != 1024 {
		t.Errorf("jetstream.DefaultOptions() = %+v", js)
	}
}

func TestLoadReportsEveryMistakeInAFileAtOnce(t *testing.T) {
	t.Parallel()
	ps := loadProblems(t, `
schema: "x; drop table y"
drivers:
  bus:
    type: kafka
    brokers: [k1:9092]
streams:
  orders:
    driver: bus
    poll_interval: fast
    batch_size: 0
    batchsize: 10
  payments:
    driver: missing
`)
	wantKeys(t, ps, "schema", "streams.orders.poll_interval", "streams.orders.batch_size",
		"streams.orders.batchsize", "streams.payments.driver")
	if len(ps.List) != 5 {
		t.Errorf("got %d problems, want 5:\n%v", len(ps.List), ps)
	}
	msg := ps.Error()
	for _, want := range []string{
		"configuration has 5 problem(s):",
		`streams.orders.batchsize: unknown key; did you mean batch_size? (line 12)`,
		`streams.orders.poll_interval: want a duration such as 500ms or 30s, got "fast" (line 10)`,
		`streams.orders.batch_size: must be between 1 and 10000, got 0 (line 11)`,
		`streams.payments.driver: no driver named "missing" is configured under drivers (line 14)`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems do not mention %q:\n%s", want, msg)
		}
	}
}

func TestLoadOverlaysTheEnvironment(t *testing.T) {
	t.Parallel()
	file := `
janitor:
  interval: 10s
drivers:
  bus:
    type: kafka
    brokers: [file:9092]
streams:
  orders:
    driver: bus
    batch_size: 50
`
	cases := []struct {
		name  string
		env   []string
		check func(*Config) string
	}{
		{"A variable overrides the file.", []string{"OUTBOXD_JANITOR__INTERVAL=20s"}, func(c *Config) string {
			return diff(c.Janitor.Interval, 20*time.Second)
		}},
		{"A list is comma-separated and trimmed.", []string{"OUTBOXD_DRIVERS__BUS__BROKERS=h1:9092, h2:9092,"}, func(c *Config) string {
			return diff(optionsOf[kafka.Options](c, "bus").Brokers, []string{"h1:9092", "h2:9092"})
		}},
		{"A variable changes one field of an entry the file made and keeps the rest.", []string{"OUTBOXD_STREAMS__ORDERS__CONCURRENCY=8"}, func(c *Config) string {
			return diff([]int{c.Streams["orders"].Concurrency, c.Streams["orders"].BatchSize}, []int{8, 50})
		}},
		{"Variables create a map entry with its defaults and a lower-cased name.", []string{
			"OUTBOXD_STREAMS__PAYMENTS__DRIVER=bus",
			"OUTBOXD_STREAMS__PAYMENTS__DEAD_LETTER__DRIVER=bus",
			"OUTBOXD_STREAMS__PAYMENTS__DEAD_LETTER__TOPIC=dead",
		}, func(c *Config) string {
			want := DefaultStream()
			want.Driver, want.DeadLetter = "bus", DeadLetter{Driver: "bus", Topic: "dead"}
			return diff(c.Streams["payments"], want)
		}},
		{"An entry name may hold and end in underscores.", []string{"OUTBOXD_STREAMS__MY_STREAM___DRIVER=bus"}, func(c *Config) string {
			return diff(c.Streams["my_stream_"].Driver, "bus")
		}},
		{"A boolean may be 1 or 0.", []string{"OUTBOXD_JANITOR__PARTITIONS__ENABLED=1", "OUTBOXD_DRIVERS__BUS__ALLOW_AUTO_TOPIC_CREATION=TRUE"}, func(c *Config) string {
			return diff([]bool{c.Janitor.Partitions.Enabled, optionsOf[kafka.Options](c, "bus").AllowAutoTopicCreation}, []bool{true, true})
		}},
		{"An empty value sets an empty string.", []string{"OUTBOXD_HTTP__ADDR="}, func(c *Config) string {
			return diff(c.HTTP.Addr, "")
		}},
		{"A driver's type may come from the environment and get that type's defaults.", []string{
			"OUTBOXD_DRIVERS__EVENTS__TYPE=jetstream", "OUTBOXD_DRIVERS__EVENTS__URL=nats://n1:4222",
		}, func(c *Config) string {
			d := optionsOf[jetstream.Options](c, "events")
			return diff([]any{d.PublishTimeout, d.MaxInFlight}, []any{5 * time.Second, 1024})
		}},
		{"The first of two identical names wins, as with os.Getenv.", []string{"OUTBOXD_LOG__LEVEL=debug", "OUTBOXD_LOG__LEVEL=error"}, func(c *Config) string {
			return diff(c.Log.Level, "debug")
		}},
		{"Harness variables, OUTBOXD_CONFIG and other prefixes are not settings.", []string{
			"OUTBOXD_TEST_DATABASE=whatever", "OUTBOXD_TEST_=x", "OUTBOXD_CONFIG=/nowhere.yaml", "OUTBOXDX=1", "PATH=/bin", "NOEQUALS",
		}, func(c *Config) string {
			return diff(c.Janitor.Interval, 10*time.Second)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := tc.check(mustLoad(t, file, tc.env...)); d != "" {
				t.Error(d)
			}
		})
	}
}

func diff(got, want any) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	return fmt.Sprintf("got %#v, want %#v", got, want)
}

func TestLoadReportsBadEnvironmentVariables(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     string
		key     string
		msgPart string
	}{
		{"A variable that names no key is a problem on the variable.", "OUTBOXD_X=1", "OUTBOXD_X", "unknown environment variable (no key x)"},
		{"A single underscore between segments gets a suggestion.", "OUTBOXD_JANITOR_INTERVAL=1s", "OUTBOXD_JANITOR_INTERVAL", "did you mean OUTBOXD_JANITOR__INTERVAL?"},
		{"Lower-case segments get the upper-case name suggested.", "OUTBOXD_log__level=debug", "OUTBOXD_log__level", "did you mean OUTBOXD_LOG__LEVEL?"},
		{"A field of a map entry that does not exist is unknown.", "OUTBOXD_STREAMS__ORDERS__BATCHSIZE=1", "OUTBOXD_STREAMS__ORDERS__BATCHSIZE", "no key streams.orders.batchsize"},
		{"An integer that does not parse names the key and the variable.", "OUTBOXD_JANITOR__PURGE_BATCH=lots", "janitor.purge_batch", `want an integer, got "lots" (from OUTBOXD_JANITOR__PURGE_BATCH)`},
		{"A boolean that does not parse lists the spellings.", "OUTBOXD_TRACING__ENABLED=yes", "tracing.enabled", "want true, false, 1 or 0"},
		{"A duration without a unit is a problem.", "OUTBOXD_JANITOR__INTERVAL=30", "janitor.interval", `want a duration such as 500ms or 30s, got "30"`},
		{"A validation problem says which variable set the value.", "OUTBOXD_LOG__LEVEL=loud", "log.level", "(from OUTBOXD_LOG__LEVEL)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps := loadProblems(t, "", tc.env)
			wantKeys(t, ps, tc.key)
			if !strings.Contains(ps.List[0].Msg, tc.msgPart) {
				t.Errorf("message %q does not contain %q", ps.List[0].Msg, tc.msgPart)
			}
		})
	}
}

func TestLoadReportsFileProblems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		file    string
		keys    []string
		msgPart string
	}{
		{"Text that is not YAML is a problem on the file.", "streams: [\n", []string{FileKey}, "not valid YAML"},
		{"A top level that is not a mapping is a problem on the file.", "- a\n- b\n", []string{FileKey}, "want a mapping of settings at the top level, got a list"},
		{"Two documents are a problem on the file.", "log: {level: info}\n---\nlog: {level: debug}\n", []string{FileKey}, "more than one YAML document"},
		{"A key given twice is a problem.", "schema: a\nschema: b\n", []string{"schema"}, "set twice (lines 1 and 2)"},
		{"A section given a scalar is a problem.", "janitor: often\n", []string{"janitor"}, "want a mapping of settings, got a string"},
		{"An entry that is not a mapping is one problem, not one per missing field.", "streams:\n  orders: 5\n", []string{"streams.orders"}, "want a mapping of settings, got a number"},
		{"An empty key is named as such.", "\"\": 1\nstreams: {\"\": {driver: x}}\n", []string{`""`, `streams.""`, `streams."".driver`}, `"": unknown key`},
		{"A list item that is not a string is a problem.", "drivers:\n  bus:\n    type: kafka\n    brokers: [k1:9092, {a: b}]\n", []string{"drivers.bus.brokers"}, "item 2: want a string, got a mapping"},
		{"A list given a scalar is a problem.", "drivers:\n  bus:\n    type: kafka\n    brokers: k1:9092\n", []string{"drivers.bus.brokers"}, "want a list, got a string"},
		{"A duration given a number is a problem.", "janitor:\n  interval: 5\n", []string{"janitor.interval"}, "want a duration such as 500ms or 30s, got 5 (line 2)"},
		{"An integer given a fraction is a problem.", "janitor:\n  purge_batch: 1.5\n", []string{"janitor.purge_batch"}, `want an integer, got "1.5"`},
		{"A boolean given yes is a problem.", "tracing:\n  enabled: yes\n", []string{"tracing.enabled"}, `want true or false, got "yes"`},
		{"Merge keys are refused.", "base: &b {level: info}\nlog:\n  <<: *b\n", []string{"base", "log"}, "merge keys"},
		{"A missing file is a problem on the file.", "", []string{FileKey}, "cannot read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := "/nonexistent/outboxd.yaml"
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			_, err := Load(path, nil, registry)
			ps := asProblems(t, err)
			wantKeys(t, ps, tc.keys...)
			if !strings.Contains(ps.Error(), tc.msgPart) {
				t.Errorf("problems do not contain %q:\n%v", tc.msgPart, ps)
			}
		})
	}
}

func TestLoadAcceptsTheFileForms(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		file  string
		check func(*Config) string
	}{
		{"An empty value keeps the default.", "janitor:\n  interval:\nstreams:\n", func(c *Config) string {
			return diff(c.Janitor.Interval, 30*time.Second)
		}},
		{"A file of comments only changes nothing.", "# nothing here\n", func(c *Config) string {
			return diff(*c, Default())
		}},
		{"A bare zero is a zero duration.", "janitor:\n  retention: 0\n", func(c *Config) string {
			return diff(c.Janitor.Retention, time.Duration(0))
		}},
		{"A quoted integer is an integer.", "janitor:\n  purge_batch: \"7\"\n", func(c *Config) string {
			return diff(c.Janitor.PurgeBatch, 7)
		}},
		{"An integer is a float.", "tracing:\n  sample_ratio: 0\n", func(c *Config) string {
			return diff(c.Tracing.SampleRatio, 0.0)
		}},
		{"Aliases are followed.", "drivers:\n  a: &k {type: kafka, brokers: [k:9092]}\n  b: *k\n", func(c *Config) string {
			return diff(c.Drivers["a"], c.Drivers["b"])
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := tc.check(mustLoad(t, tc.file)); d != "" {
				t.Error(d)
			}
		})
	}
}

func TestDriverFieldsOfAnotherTypeAreProblems(t *testing.T) {
	t.Parallel()
	ps := loadProblems(t, `
drivers:
  bus:
    type: nats
    url: nats://n:4222
    brokers: [k:9092]
    allow_auto_topic_creation: false
    sasl: {mechanism: plain}
  kf:
    type: kafka
    brokers: [k:9092]
    max_in_flight: 10
    publish_timeout: 0s
    url: nats://n:4222
  js:
    type: jetstream
    url: nats://n:4222
    provision: {partitions: 3, bogus: 1}
  sink:
    type: discard
    tls: {enabled: true}
`, "OUTBOXD_DRIVERS__BUS__PROVISION__ENABLED=true")
	wantKeys(t, ps, "drivers.bus.brokers", "drivers.bus.allow_auto_topic_creation", "drivers.bus.sasl.mechanism",
		"drivers.kf.max_in_flight", "drivers.kf.publish_timeout", "drivers.kf.url", "drivers.js.provision.partitions",
		"drivers.js.provision.bogus", "drivers.sink.tls.enabled", "drivers.bus.provision.enabled")
	for _, want := range []string{
		"drivers.bus.brokers: only valid for type kafka (line 6)",
		"drivers.bus.allow_auto_topic_creation: only valid for type kafka (line 7)",
		"drivers.kf.max_in_flight: only valid for type jetstream",
		"drivers.kf.publish_timeout: only valid for types nats, jetstream, redis, rabbitmq and postgres",
		"drivers.kf.url: only valid for types nats, jetstream, http, rabbitmq and postgres",
		"drivers.js.provision.partitions: only valid for type kafka",
		"drivers.js.provision.bogus: unknown key",
		"drivers.sink.tls.enabled: only valid for types kafka, nats, jetstream, http, redis and rabbitmq",
		"drivers.bus.provision.enabled: only valid for types kafka and jetstream (from OUTBOXD_DRIVERS__BUS__PROVISION__ENABLED)",
	} {
		if !strings.Contains(ps.Error(), want) {
			t.Errorf("problems do not contain %q:\n%v", want, ps)
		}
	}
}

func TestExplicitDriverFieldsAreNotReplacedByDefaults(t *testing.T) {
	t.Parallel()
	ps := loadProblems(t, "drivers:\n  bus:\n    type: kafka\n    brokers: [k:9092]\n    write_timeout: 0s\n")
	wantKeys(t, ps, "drivers.bus.write_timeout")
	cfg := mustLoad(t, "drivers:\n  bus:\n    type: kafka\n    brokers: [k:9092]\n    client_id: mine\n")
	if got := optionsOf[kafka.Options](cfg, "bus"); got.ClientID != "mine" || got.WriteTimeout != 10*time.Second {
		t.Errorf("driver = %+v, want client_id mine and the default write_timeout", got)
	}
}

func TestYAMLLoadsBackToTheSameConfig(t *testing.T) {
	t.Parallel()
	want := validConfig()
	want.DatabaseURL = "host=db port=5432 user=app dbname=app"
	want.Log.Format = "text"
	want.Tracing = Tracing{Enabled: true, Endpoint: "http://127.0.0.1:4318", SampleRatio: 0.25, ServiceName: "svc"}
	want.Janitor.Retention = 90 * time.Minute
	s := want.Streams["orders"]
	s.MaxDefer, s.DeadLetter, s.TopicPrefix = 36*time.Hour, DeadLetter{Driver: "events", Topic: "dlq"}, "true"
	want.Streams["orders"] = s
	editOptions(&want, "bus", func(o *kafka.Options) { o.TLS = driveropt.TLS{Enabled: true, CAFile: "/ca.pem"} })
	if err := want.Validate(); err != nil {
		t.Fatalf("the fixture is invalid: %v", err)
	}
	out := want.YAML()
	got := mustLoad(t, string(out))
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("loading YAML() gave\n%+v\nwant\n%+v\nYAML:\n%s", *got, want, out)
	}
	for _, line := range []string{"database_url: host=db port=5432 user=app dbname=app\n", "    max_defer: 36h\n",
		"    topic_prefix: \"true\"\n", "  sample_ratio: 0.25\n", "    brokers:\n      - k1:9092\n      - k2:9092\n", "  retention: 1h30m\n"} {
		if !strings.Contains(string(out), line) {
			t.Errorf("YAML() lacks %q:\n%s", line, out)
		}
	}
	if strings.Contains(string(out), "  events:\n    type: nats\n    brokers") || strings.Count(string(out), "client_id:") != 1 {
		t.Errorf("YAML() shows fields of another driver type:\n%s", out)
	}
}

func TestProblemsListOnePerLineSortedByKey(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Log.Level = "loud"
	c.Schema = ""
	c.Janitor.PurgeBatch = 0
	err := c.Validate()
	ps := asProblems(t, err)
	want := "configuration has 3 problem(s):\n" +
		"  janitor.purge_batch: must be between 1 and 100000, got 0\n" +
		"  log.level: want one of debug, info, warn, error; got \"loud\"\n" +
		"  schema: must not be empty"
	if got := err.Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
	var p Problem
	if !errors.As(err, &p) || p.Key != "janitor.purge_batch" {
		t.Errorf("errors.As(Problem) = %+v, want the first problem", p)
	}
	if !slices.IsSortedFunc(ps.List, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) }) {
		t.Errorf("List is not sorted: %v", ps.List)
	}
}

func TestRequireStreamsNeedsAStream(t *testing.T) {
	t.Parallel()
	cfg := Default()
	ps := asProblems(t, cfg.RequireStreams())
	wantKeys(t, ps, "streams")
	valid := validConfig()
	if err := valid.RequireStreams(); err != nil {
		t.Errorf("RequireStreams with a stream: %v", err)
	}
}

func TestFilePathPrefersTheFlag(t *testing.T) {
	t.Parallel()
	env := []string{"OUTBOXD_CONFIG=/etc/outboxd.yaml", "OUTBOXD_CONFIG=/second.yaml"}
	for _, c := range []struct{ flag, want string }{
		{"/flag.yaml", "/flag.yaml"},
		{"", "/etc/outboxd.yaml"},
	} {
		if got := FilePath(c.flag, env); got != c.want {
			t.Errorf("FilePath(%q) = %q, want %q", c.flag, got, c.want)
		}
	}
	if got := FilePath("", []string{"HOME=/root"}); got != "" {
		t.Errorf("FilePath without flag or variable = %q, want \"\"", got)
	}
}
