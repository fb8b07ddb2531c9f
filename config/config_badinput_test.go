package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The bad-input catalogue, configuration: each value goes through Load, as `outboxd run`
// and `outboxd config check` read it (a file on top of the defaults, the environment on
// top), and must come back as a Problem on the key it belongs to, naming what is wrong,
// without quoting any secret.

// base is a valid file every case breaks one way: two drivers, two streams.
const base = `
database_url: postgres://app:file-pw-5d1e@db:5432/app
drivers:
  bus: {type: kafka, brokers: ["k1:9092"]}
  events: {type: nats, url: "nats://n1:4222", token: nats-tok-81c0}
streams:
  orders: {driver: bus}
  shipments: {driver: events, topic_prefix: "shop.shipments."}
`

// secretsInBase are the secrets base and the cases hold; no problem may show one.
var secretsInBase = []string{"file-pw-5d1e", "nats-tok-81c0", "env-pw-c4a9", "kv-pw-2b7f", "it's kv-pw-9e03"}

func TestEveryBadConfigurationValueIsAProblemNamingItsKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		file    string // appended to base (YAML merges nothing: a repeated top-level key is a problem)
		environ []string
		key     string
		msgPart string
	}{
		// Durations.
		{"A duration without a unit is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__POLL_INTERVAL=5"},
			"streams.orders.poll_interval", `want a duration such as 500ms or 30s, got "5"`},
		{"A bare number as a duration in the file is refused", "janitor: {interval: 30}\n", nil,
			"janitor.interval", "want a duration such as 500ms or 30s, got 30"},
		{"A duration in words is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__BACKOFF_MAX=5 minutes"},
			"streams.orders.backoff_max", `got "5 minutes"`},
		{"A duration too long for Go is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__LEASE_TTL=9999999999h"},
			"streams.orders.lease_ttl", `want a duration such as 500ms or 30s, got "9999999999h"`},
		{"A negative publish timeout is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__PUBLISH_TIMEOUT=-1s"},
			"streams.orders.publish_timeout", "must be between 100ms and 10m, got -1s"},
		{"A negative max_defer is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__MAX_DEFER=-1h"},
			"streams.orders.max_defer", "must be 0 (unbounded) or at least 1s, got -1h"},
		{"A negative retention is refused", "", []string{"OUTBOXD_JANITOR__RETENTION=-24h"},
			"janitor.retention", "must not be negative"},
		{"A zero stats interval is refused", "", []string{"OUTBOXD_JANITOR__STATS_INTERVAL=0s"},
			"janitor.stats_interval", "must be positive, got 0s"},
		{"A boolean as a duration is refused", "janitor: {interval: true}\n", nil,
			"janitor.interval", "want a duration such as 500ms or 30s"},
		// Sizes.
		{"A negative batch size is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__BATCH_SIZE=-1"},
			"streams.orders.batch_size", "must be between 1 and 10000, got -1"},
		{"A flow rate of zero is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__FLOW_RATE=0"},
			"streams.orders.flow_rate", "must be between 1 and 1000000, got 0"},
		{"A negative concurrency is refused", "", []string{"OUTBOXD_STREAMS__SHIPMENTS__CONCURRENCY=-2"},
			"streams.shipments.concurrency", "must be between 1 and 64, got -2"},
		{"A negative attempt budget is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__MAX_ATTEMPTS=-3"},
			"streams.orders.max_attempts", "must be between 1 and 1000, got -3"},
		{"A negative reclaim batch is refused", "", []string{"OUTBOXD_JANITOR__RECLAIM_BATCH=-5"},
			"janitor.reclaim_batch", "must be between 1 and 100000, got -5"},
		{"A fractional batch size is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__BATCH_SIZE=10.5"},
			"streams.orders.batch_size", `want an integer, got "10.5"`},
		{"A batch size in exponent notation is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__BATCH_SIZE=1e3"},
			"streams.orders.batch_size", `want an integer, got "1e3"`},
		{"A batch size beyond any integer is refused", "", []string{"OUTBOXD_STREAMS__ORDERS__BATCH_SIZE=99999999999999999999"},
			"streams.orders.batch_size", "want an integer"},
		{"A JetStream in-flight limit on a core NATS driver is refused", "", []string{"OUTBOXD_DRIVERS__EVENTS__MAX_IN_FLIGHT=-1"},
			"drivers.events.max_in_flight", "only valid for type jetstream"},
		// Unknown keys.
		{"A misspelt top-level key is refused with a suggestion", "stream:\n  x: {driver: bus}\n", nil,
			"stream", "unknown key; did you mean streams?"},
		{"A misspelt stream key is refused with a suggestion", "", []string{"OUTBOXD_STREAMS__ORDERS__BATCHSIZE=10"},
			"OUTBOXD_STREAMS__ORDERS__BATCHSIZE", "did you mean OUTBOXD_STREAMS__ORDERS__BATCH_SIZE?"},
		{"An environment variable that names no setting is refused", "", []string{"OUTBOXD_DATABASE_URI=postgres://db/app"},
			"OUTBOXD_DATABASE_URI", "unknown environment variable (no key database_uri); did you mean OUTBOXD_DATABASE_URL?"},
		{"A key of another driver type is refused", "", []string{"OUTBOXD_DRIVERS__BUS__URL=nats://n:4222"},
			"drivers.bus.url", "only valid for types nats, jetstream, http, rabbitmq and postgres"},
		{"A key set twice in the file is refused", "log: {level: info, level: debug}\n", nil,
			"log.level", "set twice"},
		// DSNs.
		{"A DSN of another database is refused", "", []string{"OUTBOXD_DATABASE_URL=mysql://app:env-pw-c4a9@db/app"},
			"database_url", `want a postgres:// or postgresql:// URL, got scheme "mysql"`},
		{"A DSN URL with a port that is not a number is refused", "", []string{"OUTBOXD_DATABASE_URL=postgres://app:env-pw-c4a9@db:pg/app"},
			"database_url", `invalid port ":pg"`},
		{"A DSN URL with a port beyond 65535 is refused", "", []string{"OUTBOXD_DATABASE_URL=postgres://app:env-pw-c4a9@db:99999/app"},
			"database_url", `the port must be a number from 1 to 65535, got "99999"`},
		{"A DSN URL with an unknown sslmode is refused", "", []string{"OUTBOXD_DATABASE_URL=postgres://app:env-pw-c4a9@db/app?sslmode=required"},
			"database_url", `sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full, got "required"`},
		{"A key=value DSN with an unknown sslmode is refused", "", []string{"OUTBOXD_DATABASE_URL=host=db password = 'it\\'s kv-pw-9e03' sslmode=on"},
			"database_url", `sslmode must be one of`},
		{"A key=value DSN with a port that is not a number is refused", "", []string{"OUTBOXD_DATABASE_URL=host=db port=five password=kv-pw-2b7f"},
			"database_url", `the port must be a number from 1 to 65535, got "five"`},
		{"A key=value DSN with an unclosed quote is refused", "", []string{"OUTBOXD_DATABASE_URL=host=db password='kv-pw-2b7f"},
			"database_url", "has no closing quote"},
		{"A key=value DSN missing its = is refused", "", []string{"OUTBOXD_DATABASE_URL=host=db dbname"},
			"database_url", "want = after the key"},
		{"A DSN URL with a badly encoded password is refused without quoting it", "", []string{"OUTBOXD_DATABASE_URL=postgres://app:env-pw-c4a9%zz@db/app"},
			"database_url", "the user name or password is not percent-encoded correctly"},
		{"An empty DSN is refused", "", []string{"OUTBOXD_DATABASE_URL="},
			"database_url", "required"},
		// Names that collide (see also TestStreamNamesThatCollideAreRefused).
		{"A NATS dead-letter subject inside its own stream's prefix is refused", "",
			[]string{"OUTBOXD_STREAMS__SHIPMENTS__DEAD_LETTER__DRIVER=events", "OUTBOXD_STREAMS__SHIPMENTS__DEAD_LETTER__TOPIC=shop.shipments.dead"},
			"streams.shipments.dead_letter.topic", `"shop.shipments.dead" lies among the subjects of stream "shipments" (driver "events", topic_prefix "shop.shipments.")`},
		{"A NATS dead-letter subject inside another stream's prefix on the same driver is refused", "",
			[]string{"OUTBOXD_STREAMS__ORDERS__DEAD_LETTER__DRIVER=events", "OUTBOXD_STREAMS__ORDERS__DEAD_LETTER__TOPIC=shop.shipments.orders-dlq"},
			"streams.orders.dead_letter.topic", `lies among the subjects of stream "shipments"`},
		// Unknown driver.
		{"A stream routed to a driver nobody configured is refused", "", []string{"OUTBOXD_STREAMS__REFUNDS__DRIVER=payments-bus"},
			"streams.refunds.driver", `no driver named "payments-bus" is configured under drivers`},
		{"A dead letter routed to a driver nobody configured is refused", "",
			[]string{"OUTBOXD_STREAMS__ORDERS__DEAD_LETTER__DRIVER=dlq-bus", "OUTBOXD_STREAMS__ORDERS__DEAD_LETTER__TOPIC=dead"},
			"streams.orders.dead_letter.driver", `no driver named "dlq-bus"`},
		{"A driver of an unknown type is refused", "", []string{"OUTBOXD_DRIVERS__PIGEON__TYPE=carrier-pigeon"},
			"drivers.pigeon.type", "want one of " + strings.Join(registry.Types(), ", ") + `; got "carrier-pigeon"`},
		// Secrets in the wrong shape.
		{"A secret copied from redacted output is refused", "", []string{"OUTBOXD_DRIVERS__EVENTS__TOKEN=[REDACTED]"},
			"drivers.events.token", "holds the placeholder [REDACTED], not a secret"},
		{"A short admin token is refused without quoting it", "", []string{"OUTBOXD_HTTP__ADMIN_TOKEN=env-pw-c4a9"},
			"http.admin_token", "must be at least 16 characters long"},
		{"A schema and table too long together for the notification channel are refused", "",
			[]string{"OUTBOXD_SCHEMA=" + strings.Repeat("s", 30), "OUTBOXD_TABLE=" + strings.Repeat("t", 40)},
			"table", "71 bytes long; PostgreSQL allows at most 63"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := loadProblems(t, base+c.file, c.environ...)
			found := false
			for _, p := range ps.List {
				if p.Key == c.key && strings.Contains(p.Msg, c.msgPart) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no problem on %s saying %q:\n%v", c.key, c.msgPart, ps)
			}
			for _, secret := range secretsInBase {
				if strings.Contains(ps.Error(), secret) {
					t.Fatalf("a problem shows the secret %q:\n%v", secret, ps)
				}
			}
		})
	}
}

func TestStreamNamesThatCollideAreRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		file    string
		environ []string
		key     string
		msgPart string
	}{
		{"Two spellings of one stream, one in upper case, are refused rather than merged",
			"streams:\n  Orders: {driver: bus}\n  orders: {driver: bus}\ndrivers:\n  bus: {type: kafka, brokers: [\"k:9092\"]}\n", nil,
			"streams.Orders", "lower-case"},
		{"A stream in upper case next to its lower-case twin from the environment is refused",
			"streams:\n  ORDERS: {driver: bus}\ndrivers:\n  bus: {type: kafka, brokers: [\"k:9092\"]}\n",
			[]string{"OUTBOXD_STREAMS__ORDERS__DRIVER=bus"}, "streams.ORDERS", "lower-case"},
		{"A stream name holding __, which no environment variable can name, is refused",
			"streams:\n  a__b: {driver: bus}\ndrivers:\n  bus: {type: kafka, brokers: [\"k:9092\"]}\n", nil,
			"streams.a__b", `hold no "__"`},
		{"A driver in upper case next to its lower-case twin is refused",
			"drivers:\n  Bus: {type: kafka, brokers: [\"k:9092\"]}\n  bus: {type: kafka, brokers: [\"k:9092\"]}\n", nil,
			"drivers.Bus", "lower-case"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := loadProblems(t, c.file, c.environ...)
			for _, p := range ps.List {
				if p.Key == c.key && strings.Contains(p.Msg, c.msgPart) {
					return
				}
			}
			t.Fatalf("no problem on %s saying %q:\n%v", c.key, c.msgPart, ps)
		})
	}
}

// A DSN Validate accepts is one pgx parses: the mistakes pgx would report when outboxd
// connects, quoting the DSN, are Problems first.
func TestEveryDSNValidateAcceptsIsOnePgxParses(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://app:pw@db:5432/app?sslmode=verify-full",
		"postgresql://db/app?sslmode=disable&connect_timeout=5",
		"postgres://app@db1:5432,db2:5433/app?target_session_attrs=read-write",
		"host=db port=5432 dbname=app user=app password='it\\'s fine' sslmode=require",
		"host=/var/run/postgresql dbname=app",
	} {
		c := validConfig()
		c.DatabaseURL = dsn
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%q): %v", dsn, err)
			continue
		}
		if _, err := pgx.ParseConfig(dsn); err != nil {
			t.Errorf("Validate accepted %q, pgx does not: %v", dsn, err)
		}
	}
	for _, dsn := range []string{
		"postgres://db:0/app", "postgres://db:65536/app", "postgres://db/app?sslmode=yes",
		"host=db sslmode=strict", "host=db port=-1", "host=db1,db2 port=5432,x",
	} {
		c := validConfig()
		c.DatabaseURL = dsn
		if err := c.Validate(); err == nil {
			_, perr := pgx.ParseConfig(dsn)
			t.Errorf("Validate accepted %q (pgx: %v)", dsn, perr)
		}
	}
}

func TestRedactParseErrorHidesPasswordsPgxMisses(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"host=db password = kv-pw-2b7f sslmode=bogus",
		`host=db password='it\'s kv-pw-9e03' sslmode=bogus`,
		"postgres://app:env-pw-c4a9@db/app?sslmode=bogus",
		"postgres://app@db/app?password=env-pw-c4a9&sslmode=bogus",
		"host=db password=kv-pw-2b7f sslrootcert=/nonexistent sslmode=verify-full",
	} {
		_, err := pgx.ParseConfig(dsn)
		if err == nil {
			t.Fatalf("pgx parsed %q", dsn)
		}
		safe := RedactParseError(err)
		for _, secret := range secretsInBase {
			if strings.Contains(safe.Error(), secret) {
				t.Errorf("RedactParseError(%q) = %q shows %q", dsn, safe, secret)
			}
		}
		if !strings.Contains(safe.Error(), "cannot parse") || !strings.Contains(safe.Error(), "sslmode") &&
			!strings.Contains(safe.Error(), "CA file") {
			t.Errorf("RedactParseError(%q) = %q; want pgx's reason kept", dsn, safe)
		}
	}
	plain := errors.New("not a parse error")
	if RedactParseError(plain) != plain { //nolint:errorlint // identity: the very same error must come back
		t.Fatal("another error was changed")
	}
}

// On Kafka a dead-letter topic under the stream's prefix is a topic of its own, as
// docs/configuration.md's example has it.
func TestAKafkaDeadLetterTopicUnderTheStreamsPrefixIsAccepted(t *testing.T) {
	t.Parallel()
	mustLoad(t, base, "OUTBOXD_STREAMS__ORDERS__TOPIC_PREFIX=orders.",
		"OUTBOXD_STREAMS__ORDERS__DEAD_LETTER__DRIVER=bus", "OUTBOXD_STREAMS__ORDERS__DEAD_LETTER__TOPIC=orders.dead")
}
