package config

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/router/nats"
)

func TestValidConfigPasses(t *testing.T) {
	t.Parallel()
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("validConfig: %v", err)
	}
}

func TestValidateFindsEachBrokenRule(t *testing.T) {
	t.Parallel()
	stream := func(f func(*Stream)) func(*Config) {
		return func(c *Config) { s := c.Streams["orders"]; f(&s); c.Streams["orders"] = s }
	}
	driver := func(name string, f func(*Driver)) func(*Config) {
		return func(c *Config) { d := c.Drivers[name]; f(&d); c.Drivers[name] = d }
	}
	bus := func(f func(*kafka.Options)) func(*Config) { return func(c *Config) { editOptions(c, "bus", f) } }
	events := func(f func(*nats.Options)) func(*Config) { return func(c *Config) { editOptions(c, "events", f) } }
	js := func(f func(*jetstream.Options)) func(*Config) { return func(c *Config) { editOptions(c, "js", f) } }
	cases := []struct {
		name    string
		break_  func(*Config)
		key     string
		msgPart string
	}{
		{"An empty DSN is a problem.", func(c *Config) { c.DatabaseURL = "" }, "database_url", "required"},
		{"A DSN URL with another scheme is a problem.", func(c *Config) { c.DatabaseURL = "mysql://db/app" }, "database_url", `got scheme "mysql"`},
		{"A DSN URL with a bad port is a problem.", func(c *Config) { c.DatabaseURL = "postgres://db:port/app" }, "database_url", `invalid port ":port"`},
		{"A key=value DSN without = is a problem.", func(c *Config) { c.DatabaseURL = "host=db dbname" }, "database_url", "want = after the key ending at byte 14"},
		{"A key=value DSN with an open quote is a problem.", func(c *Config) { c.DatabaseURL = "host='db" }, "database_url", "no closing quote"},
		{"A replica id with a space is a problem.", func(c *Config) { c.ReplicaID = "a b" }, "replica_id", "without spaces"},
		{"An empty replica id is a problem.", func(c *Config) { c.ReplicaID = "" }, "replica_id", "1 to 64"},
		{"A replica id of 65 characters is a problem.", func(c *Config) { c.ReplicaID = strings.Repeat("é", 65) }, "replica_id", "1 to 64"},
		{"A keepalive idle under 1s is a problem.", func(c *Config) { c.Database.KeepaliveIdle = 500 * time.Millisecond }, "database.keepalive_idle", "between 1s and 2h"},
		{"A keepalive interval in fractions of a second is a problem.", func(c *Config) { c.Database.KeepaliveInterval = 1500 * time.Millisecond }, "database.keepalive_interval", "whole number of seconds"},
		{"A keepalive count of 0 is a problem.", func(c *Config) { c.Database.KeepaliveCount = 0 }, "database.keepalive_count", "between 1 and 100"},
		{"A user timeout under 1s other than 0 is a problem.", func(c *Config) { c.Database.UserTimeout = 10 * time.Millisecond }, "database.user_timeout", "between 1s and 1h"},
		{"A pool of one connection is a problem.", func(c *Config) { c.Database.MaxConns = 1 }, "database.max_conns", "between 2 and 1000"},
		{"A negative pool bound is a problem.", func(c *Config) { c.Database.MaxConns = -5 }, "database.max_conns", "between 2 and 1000"},
		{"A pooler mode outboxd does not know is a problem.", func(c *Config) { c.Database.Pooler = "session" }, "database.pooler", "auto"},
		{"A transaction pooler without a listen URL is a problem.", func(c *Config) { c.Database.Pooler = PoolerTransaction }, "database.listen_url", "required when database.pooler is transaction"},
		{"A listen URL that does not parse is a problem.", func(c *Config) { c.Database.ListenURL = "postgres://db:port/app" }, "database.listen_url", `invalid port ":port"`},
		{"An unknown log level is a problem.", func(c *Config) { c.Log.Level = "trace" }, "log.level", "want one of debug, info, warn, error"},
		{"An unknown log format is a problem.", func(c *Config) { c.Log.Format = "xml" }, "log.format", "want one of json, text"},
		{"An upper-case stream name is a problem.", func(c *Config) { c.Streams["Orders"] = c.Streams["orders"] }, "streams.Orders", "stream name"},
		{"A stream name with __ is a problem.", func(c *Config) { c.Streams["a__b"] = c.Streams["orders"] }, "streams.a__b", "no \"__\""},
		{"A driver name of 64 characters is a problem.", func(c *Config) { c.Drivers[strings.Repeat("d", 64)] = c.Drivers["bus"] }, "drivers." + strings.Repeat("d", 64), "driver name"},
		{"A stream without a driver is a problem.", stream(func(s *Stream) { s.Driver = "" }), "streams.orders.driver", "required"},
		{"A stream naming a missing driver is a problem.", stream(func(s *Stream) { s.Driver = "nope" }), "streams.orders.driver", `no driver named "nope"`},
		{"A batch size over 10000 is a problem.", stream(func(s *Stream) { s.BatchSize = 10001 }), "streams.orders.batch_size", "between 1 and 10000"},
		{"A concurrency of 0 is a problem.", stream(func(s *Stream) { s.Concurrency = 0 }), "streams.orders.concurrency", "between 1 and 64"},
		{"A poll interval under 10ms is a problem.", stream(func(s *Stream) { s.PollInterval = 9 * time.Millisecond }), "streams.orders.poll_interval", "between 10ms and 1h"},
		{"A lease under 1s is a problem.", stream(func(s *Stream) { s.LeaseTTL = 999 * time.Millisecond }), "streams.orders.lease_ttl", "between 1s and 24h"},
		{"A lease no longer than the publish timeout is a problem.", stream(func(s *Stream) { s.LeaseTTL = 10 * time.Second }), "streams.orders.lease_ttl", "must exceed publish_timeout (10s)"},
		{"A publish timeout over 10m is a problem.", stream(func(s *Stream) { s.PublishTimeout = 11 * time.Minute }), "streams.orders.publish_timeout", "between 100ms and 10m"},
		{"A zero initial backoff is a problem.", stream(func(s *Stream) { s.BackoffInitial = 0 }), "streams.orders.backoff_initial", "positive"},
		{"A maximum backoff under the initial one is a problem.", stream(func(s *Stream) { s.BackoffMax = 500 * time.Millisecond }), "streams.orders.backoff_max", "at least backoff_initial (1s)"},
		{"More than 1000 attempts is a problem.", stream(func(s *Stream) { s.MaxAttempts = 1001 }), "streams.orders.max_attempts", "between 1 and 1000"},
		{"A flow rate of 0 is a problem.", stream(func(s *Stream) { s.FlowRate = 0 }), "streams.orders.flow_rate", "between 1 and 1000000"},
		{"A max defer under 1s is a problem.", stream(func(s *Stream) { s.MaxDefer = time.Millisecond }), "streams.orders.max_defer", "0 (unbounded) or at least 1s"},
		{"A ttl under 1s is a problem.", stream(func(s *Stream) { s.TTL = 500 * time.Millisecond }), "streams.orders.ttl", "0 (no expiry) or at least 1s"},
		{"A negative ttl is a problem.", stream(func(s *Stream) { s.TTL = -time.Minute }), "streams.orders.ttl", "0 (no expiry) or at least 1s"},
		{"Dead-lettering expired messages without a destination is a problem.", stream(func(s *Stream) { s.DeadLetter.Expired = true }), "streams.orders.dead_letter.expired", "needs dead_letter.driver and dead_letter.topic"},
		{"A dead-letter driver without a topic is a problem.", stream(func(s *Stream) { s.DeadLetter.Driver = "bus" }), "streams.orders.dead_letter.topic", "required when dead_letter.driver is set"},
		{"An unknown claim mode is a problem.", stream(func(s *Stream) { s.Claim = "locks" }), "streams.orders.claim", "want one of auto, lease, transaction"},
		{"An ordered stream cannot claim in a transaction.", stream(func(s *Stream) { s.Ordered, s.Claim = true, ClaimTransaction }),
			"streams.orders.claim", "must be lease or auto for an ordered stream"},
		{"An unknown format is a problem.", stream(func(s *Stream) { s.Format = "json" }), "streams.orders.format", "want one of raw, cloudevents"},
		{"CloudEvents defaults on a raw stream are a problem.", stream(func(s *Stream) { s.CloudEvents.Type = "t" }), "streams.orders.cloudevents", "format is \"raw\""},
		{"A CloudEvents source with a space is a problem.", stream(func(s *Stream) { s.Format, s.CloudEvents.Source = "cloudevents", "my shop" }), "streams.orders.cloudevents.source", "must be a URI-reference"},
		{"A CloudEvents type with surrounding space is a problem.", stream(func(s *Stream) { s.Format, s.CloudEvents.Type = "cloudevents", " t" }), "streams.orders.cloudevents.type", "whitespace"},
		{"A dead-letter topic without a driver is a problem.", stream(func(s *Stream) { s.DeadLetter.Topic = "dlq" }), "streams.orders.dead_letter.driver", "required when dead_letter.topic is set"},
		{"A dead-letter driver that does not exist is a problem.", stream(func(s *Stream) { s.DeadLetter = DeadLetter{Driver: "gone", Topic: "dlq"} }), "streams.orders.dead_letter.driver", `no driver named "gone"`},
		{"A driver without a type is a problem.", driver("bus", func(d *Driver) { d.Type = "" }), "drivers.bus.type", "required"},
		{"A driver of an unknown type is a problem.", driver("bus", func(d *Driver) { d.Type, d.Options = "rabbit", nil }), "drivers.bus.type", `no driver of type "rabbit" is registered`},
		{"A kafka driver without brokers is a problem.", bus(func(d *kafka.Options) { d.Brokers = nil }), "drivers.bus.brokers", "at least one host:port"},
		{"A broker without a port is a problem.", bus(func(d *kafka.Options) { d.Brokers = []string{"k1:9092", "k2"} }), "drivers.bus.brokers", `item 2: want host:port, got "k2"`},
		{"A broker with port 0 is a problem.", bus(func(d *kafka.Options) { d.Brokers = []string{"k1:0"} }), "drivers.bus.brokers", "1 to 65535"},
		{"An unknown compression is a problem.", bus(func(d *kafka.Options) { d.Compression = "brotli" }), "drivers.bus.compression", "none, gzip, snappy, lz4, zstd"},
		{"A zero write timeout is a problem.", bus(func(d *kafka.Options) { d.WriteTimeout = 0 }), "drivers.bus.write_timeout", "positive"},
		{"An unknown SASL mechanism is a problem.", bus(func(d *kafka.Options) { d.SASL = kafka.SASL{Mechanism: "gssapi", Username: "u", Password: "p"} }), "drivers.bus.sasl.mechanism", "want one of"},
		{"A SASL mechanism without a password is a problem.", bus(func(d *kafka.Options) { d.SASL = kafka.SASL{Mechanism: "plain", Username: "u"} }), "drivers.bus.sasl.password", "required when sasl.mechanism is set"},
		{"A SASL user without a mechanism is a problem.", bus(func(d *kafka.Options) { d.SASL = kafka.SASL{Username: "u", Password: "p"} }), "drivers.bus.sasl.mechanism", "required when"},
		{"A NATS driver without a URL is a problem.", events(func(d *nats.Options) { d.URL = "" }), "drivers.events.url", "required"},
		{"A NATS URL with another scheme is a problem.", events(func(d *nats.Options) { d.URL = "nats://n1:4222,http://n2:4222" }), "drivers.events.url", `server 2 ("http://n2:4222"): want scheme nats`},
		{"An empty server in a NATS list is a problem.", events(func(d *nats.Options) { d.URL = "nats://n1:4222,,nats://n2:4222" }), "drivers.events.url", "server 2"},
		{"A NATS token and user together are a problem.", events(func(d *nats.Options) { d.Token, d.Username, d.Password = "t", "u", "p" }), "drivers.events.token", "choose one way"},
		{"A NATS user without a password is a problem.", events(func(d *nats.Options) { d.Username = "u" }), "drivers.events.username", "set both or neither"},
		{"A zero NATS publish timeout is a problem.", events(func(d *nats.Options) { d.PublishTimeout = 0 }), "drivers.events.publish_timeout", "positive"},
		{"Provisioning a JetStream stream without its name is a problem.", js(func(d *jetstream.Options) { d.Provision.Enabled = true }), "drivers.js.provision.stream", "required when provision.enabled is true"},
		{"A provisioned JetStream stream name with a dot is a problem.", js(func(d *jetstream.Options) { d.Provision.Stream = "a.b" }), "drivers.js.provision.stream", "ASCII letters, digits"},
		{"An unknown JetStream retention is a problem.", js(func(d *jetstream.Options) { d.Provision.Retention = "forever" }), "drivers.js.provision.retention", "want one of limits, interest, workqueue"},
		{"A JetStream duplicate window under a second is a problem.", js(func(d *jetstream.Options) { d.Provision.DuplicateWindow = time.Millisecond }), "drivers.js.provision.duplicate_window", "between 1s and 168h"},
		{"A Kafka topic of no partitions is a problem.", bus(func(d *kafka.Options) { d.Provision.Partitions = 0 }), "drivers.bus.provision.partitions", "between 1 and 10000"},
		{"A stream without a dotted prefix on a provisioning JetStream driver is a problem.", func(c *Config) {
			editOptions(c, "js", func(o *jetstream.Options) { o.Provision.Enabled, o.Provision.Stream = true, "ORDERS" })
			s := c.Streams["orders"]
			s.Driver, s.TopicPrefix = "js", "shop"
			c.Streams["orders"] = s
		}, "streams.orders.topic_prefix", "must end with '.' when drivers.js.provision.enabled is true"},
		{"A JetStream in-flight limit over 65536 is a problem.", js(func(d *jetstream.Options) { d.MaxInFlight = 65537 }), "drivers.js.max_in_flight", "between 1 and 65536"},
		{"A CA file with TLS disabled is a problem.", js(func(d *jetstream.Options) { d.TLS.CAFile = "/ca.pem" }), "drivers.js.tls.ca_file", "tls.enabled is false"},
		{"A certificate without a key is a problem.", js(func(d *jetstream.Options) { d.TLS = driveropt.TLS{Enabled: true, CertFile: "/c.pem"} }), "drivers.js.tls.cert_file", "set both or neither"},
		{"A zero janitor interval is a problem.", func(c *Config) { c.Janitor.Interval = 0 }, "janitor.interval", "positive"},
		{"A reclaim batch over 100000 is a problem.", func(c *Config) { c.Janitor.ReclaimBatch = 100001 }, "janitor.reclaim_batch", "between 1 and 100000"},
		{"A negative retention is a problem.", func(c *Config) { c.Janitor.Retention = -time.Second }, "janitor.retention", "must not be negative"},
		{"A negative connect timeout is a problem.", func(c *Config) { c.Database.ConnectTimeout = -time.Second }, "database.connect_timeout", "must not be negative"},
		{"A zero purge batch is a problem.", func(c *Config) { c.Janitor.PurgeBatch = 0 }, "janitor.purge_batch", "between 1 and 100000"},
		{"A partition interval under 1h is a problem.", func(c *Config) { c.Janitor.Partitions.Interval = 59 * time.Minute }, "janitor.partitions.interval", "at least 1h, got 59m"},
		{"Partitions 366 ahead are a problem.", func(c *Config) { c.Janitor.Partitions.Ahead = 366 }, "janitor.partitions.ahead", "between 1 and 365"},
		{"An HTTP address without a port is a problem.", func(c *Config) { c.HTTP.Addr = "localhost" }, "http.addr", "missing port"},
		{"An HTTP address with a named port is a problem.", func(c *Config) { c.HTTP.Addr = "localhost:http" }, "http.addr", "port must be a number"},
		{"A short admin token is a problem.", func(c *Config) { c.HTTP.AdminToken = "0123456789abcde" }, "http.admin_token", "at least 16 characters"},
		{"A short read token is a problem.", func(c *Config) { c.HTTP.ReadToken = "0123456789abcde" }, "http.read_token", "at least 16 characters"},
		{"A read token equal to the admin token is a problem.", func(c *Config) {
			c.HTTP.AdminToken, c.HTTP.ReadToken = "0123456789abcdef", "0123456789abcdef"
		}, "http.read_token", "must differ from http.admin_token"},
		{"Redacted output pasted back as the read token is a problem.", func(c *Config) { c.HTTP.ReadToken = "[REDACTED]" }, "http.read_token", "placeholder"},
		{"Redacted output pasted back as a secret is a problem.", func(c *Config) { c.HTTP.AdminToken = "[REDACTED]" }, "http.admin_token", "placeholder"},
		{"A trace viewer URL without {trace_id} is a problem.", func(c *Config) { c.Tracing.UIURL = "http://jaeger:16686/trace/" }, "tracing.ui_url", "must hold {trace_id}"},
		{"A trace viewer URL that is not http or https is a problem.", func(c *Config) { c.Tracing.UIURL = "javascript:alert({trace_id})" }, "tracing.ui_url", "want an http:// or https:// URL"},
		{"A console mode that is not off, on or readonly is a problem.", func(c *Config) { c.HTTP.UI = "yes" }, "http.ui", "want one of off, on, readonly"},
		{"A console with actions but no admin token is a problem.", func(c *Config) { c.HTTP.UI = "on"; c.HTTP.ReadToken = "read-token-0123456789" }, "http.ui", "on needs http.admin_token"},
		{"A read-only console with no token at all is a problem.", func(c *Config) { c.HTTP.UI = "readonly" }, "http.ui", "readonly needs http.read_token or http.admin_token"},
		{"Redacted output pasted back as the DSN is a problem.", func(c *Config) { c.DatabaseURL = "host=db password=[REDACTED]" }, "database_url", "placeholder"},
		{"Redacted output pasted back as a DSN URL is a problem.", func(c *Config) { c.DatabaseURL = "postgres://u:[REDACTED]@db/app" }, "database_url", "placeholder"},
		{"Redacted output pasted back as a NATS URL is a problem.", events(func(d *nats.Options) { d.URL = "nats://[REDACTED]@n:4222" }), "drivers.events.url", "placeholder"},
		{"Tracing enabled without an endpoint is a problem.", func(c *Config) { c.Tracing.Enabled = true }, "tracing.endpoint", "required when tracing.enabled is true"},
		{"A tracing endpoint that is not HTTP is a problem.", func(c *Config) { c.Tracing.Endpoint = "grpc://collector:4317" }, "tracing.endpoint", "scheme must be http or https"},
		{"A sample ratio over 1 is a problem.", func(c *Config) { c.Tracing.SampleRatio = 1.5 }, "tracing.sample_ratio", "between 0 and 1"},
		{"A sample ratio of NaN is a problem.", func(c *Config) { c.Tracing.SampleRatio = math.NaN() }, "tracing.sample_ratio", "between 0 and 1"},
		{"An empty service name is a problem.", func(c *Config) { c.Tracing.ServiceName = "" }, "tracing.service_name", "required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.break_(&c)
			ps := asProblems(t, c.Validate())
			wantKeys(t, ps, tc.key)
			if !strings.Contains(ps.List[0].Msg, tc.msgPart) {
				t.Errorf("message %q does not contain %q", ps.List[0].Msg, tc.msgPart)
			}
		})
	}
}

func TestValidateAcceptsTheEdgesOfEachRange(t *testing.T) {
	t.Parallel()
	c := validConfig()
	s := c.Streams["orders"]
	s.BatchSize, s.Concurrency, s.MaxAttempts = 10000, 64, 1
	s.PollInterval, s.LeaseTTL, s.PublishTimeout = 10*time.Millisecond, 24*time.Hour, 10*time.Minute
	s.BackoffMax, s.MaxDefer = s.BackoffInitial, time.Second
	s.Format, s.CloudEvents = FormatCloudEvents, CloudEvents{Type: "com.example.order", Source: "urn:shop:orders", SubjectFromKey: true}
	c.Streams["orders"] = s
	c.DatabaseURL = "host=db port=5432 password='it\\'s ok' dbname=app"
	c.HTTP = HTTP{Addr: ":0", AdminToken: "0123456789abcdef", ReadToken: "fedcba9876543210"}
	c.Janitor.Retention = 0
	c.Janitor.Partitions.Interval = time.Hour
	c.Tracing = Tracing{Enabled: true, Endpoint: "https://collector:4318/v1/traces", SampleRatio: 0, ServiceName: "x"}
	editOptions(&c, "events", func(o *nats.Options) {
		o.URL = "n1:4222, tls://user:pw@n2:4222"
		o.Username, o.Password = "", ""
	})
	c.Drivers["0.a-b_c"] = jetstreamDriver(func(o *jetstream.Options) { o.URL, o.MaxInFlight = "wss://n:443", 65536 })
	c.Streams[strings.Repeat("s", 63)] = s
	c.ReplicaID = strings.Repeat("é", 64)
	if err := c.Validate(); err != nil {
		t.Errorf("edges of the ranges rejected: %v", err)
	}
}

func TestIdentifiersAreCheckedWithTheTableRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		ident string
		ok    bool
	}{
		{"An injection attempt is rejected.", "x; drop table y", false},
		{"Upper case is rejected.", "Messages", false},
		{"A quoted name is rejected.", `"q"`, false},
		{"A name longer than 40 bytes is rejected.", strings.Repeat("a", 41), false},
		{"A name starting pg_ is rejected.", "pg_x", false},
		{"An empty name is rejected.", "", false},
		{"A plain name is accepted.", "my_outbox", true},
		{"A name of 40 bytes is accepted.", strings.Repeat("a", 40), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, key := range []string{"schema", "table"} {
				c := validConfig()
				if key == "schema" {
					c.Schema = tc.ident
				} else {
					c.TableName = tc.ident
				}
				err := c.Validate()
				if tc.ok {
					if err != nil {
						t.Errorf("%s %q rejected: %v", key, tc.ident, err)
					}
					continue
				}
				wantKeys(t, asProblems(t, err), key)
			}
		})
	}
}
