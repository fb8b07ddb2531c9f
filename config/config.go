// Package config owns outboxd's settings: documented defaults, overlaid by an optional
// YAML file, overlaid by OUTBOXD_* environment variables.
//
// Invariants: a *Config returned by Load has passed Validate; every problem found on
// the way (parse errors, unknown keys, bad values, cross-field rules) is reported at
// once, never only the first; a secret's value never appears in any message, printout,
// log record or YAML dump produced here (only Secret.Reveal returns it); and nothing in
// this package connects to anything. The set of keys is derived from the struct tags
// below and from those of each registered driver's options, so the file format, the
// environment names and docs/configuration.md cannot drift apart (a test holds the
// docs to it).
//
// It knows no driver type: Load is given the registrations (router/drivers), and a
// drivers.<name> section is decoded into the options of the one its type selects.
// Package config is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package config

import (
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/table"
)

// FileEnv names the environment variable that points at the configuration file when
// no --config flag is given.
const FileEnv = "OUTBOXD_CONFIG"

// Struct tags: yaml is the key in the file (and, upper-cased, in the environment), or
// ",inline" for fields whose keys sit in the enclosing section; redact says how to
// strip credentials from a plain string field (dsn: a PostgreSQL DSN, urls: a
// comma-separated URL list). Driver options, declared by each driver package, follow
// the same rules.

// Secret is a string that never prints its value (see driveropt.Secret); http tokens
// and driver credentials use it.
type Secret = driveropt.Secret

// mask is what every printable form of a non-empty secret shows instead of it.
const mask = driveropt.Mask

// Config is the complete set of settings.
type Config struct {
	DatabaseURL string            `yaml:"database_url" redact:"dsn"`
	Database    Database          `yaml:"database"`
	Schema      string            `yaml:"schema"`
	TableName   string            `yaml:"table"` // Table() returns it with Schema
	ReplicaID   string            `yaml:"replica_id"`
	Log         Log               `yaml:"log"`
	Streams     map[string]Stream `yaml:"streams"`
	Drivers     map[string]Driver `yaml:"drivers"`
	Janitor     Janitor           `yaml:"janitor"`
	HTTP        HTTP              `yaml:"http"`
	Tracing     Tracing           `yaml:"tracing"`
	// Outboxes lists the outbox tables this replica serves when it serves more than
	// one (file only); empty, the top-level database_url, schema, table and streams are
	// the one outbox, named DefaultOutbox. See Served.
	Outboxes []Outbox `yaml:"outboxes"`
}

// Outbox is one outbox table a replica serves, with its own database, streams and,
// optionally, janitor settings. The keys of database and janitor that an entry leaves
// out are taken from the top-level sections, except connection URLs (redact:"dsn"),
// which belong to one database.
type Outbox struct {
	// Name labels the outbox's metrics, logs, spans and admin answers.
	Name        string            `yaml:"name"`
	DatabaseURL string            `yaml:"database_url" redact:"dsn"`
	Database    Database          `yaml:"database"`
	Schema      string            `yaml:"schema"`
	TableName   string            `yaml:"table"`
	Streams     map[string]Stream `yaml:"streams"`
	Janitor     Janitor           `yaml:"janitor"`
}

// DefaultOutbox names the one outbox of a configuration without an outboxes list.
const DefaultOutbox = "default"

// Table names the outbox's table.
func (o Outbox) Table() table.Name { return table.Name{Schema: o.Schema, Table: o.TableName} }

// Database configures how outboxd run reaches PostgreSQL (database_url says where) and
// how quickly a dead peer is noticed on its connections, on both ends. A replica holds
// session-level advisory locks (a stream's flow lock, the janitor's lock) that PostgreSQL
// releases only once it ends the session; with the kernels' defaults a server notices a
// vanished peer after about two hours.
type Database struct {
	// ConnectTimeout bounds how long run waits at start for PostgreSQL to answer; 0 waits
	// forever, so a replica started before its database comes up on its own.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// KeepaliveIdle, KeepaliveInterval and KeepaliveCount set TCP keepalive on our
	// sockets and, as tcp_keepalives_*, on the server's: a silent peer is declared dead
	// after KeepaliveIdle + KeepaliveInterval × KeepaliveCount.
	KeepaliveIdle     time.Duration `yaml:"keepalive_idle"`
	KeepaliveInterval time.Duration `yaml:"keepalive_interval"`
	KeepaliveCount    int           `yaml:"keepalive_count"`
	// UserTimeout bounds how long sent data may stay unacknowledged before the
	// connection is dropped (TCP_USER_TIMEOUT, tcp_user_timeout); 0 keeps the kernel's.
	UserTimeout time.Duration `yaml:"user_timeout"`
	// Pooler says whether database_url goes through a transaction pooler (PgBouncer's
	// transaction mode): auto asks at start (store.BehindPooler), transaction and none
	// say so without asking.
	Pooler string `yaml:"pooler"`
	// ListenURL reaches PostgreSQL directly, bypassing the pooler, for what needs a
	// session of its own: LISTEN, the janitor's and flow locks, migrations. "" uses
	// database_url, which a transaction pooler forbids.
	ListenURL string `yaml:"listen_url" redact:"dsn"`
	// MaxConns bounds the connections the pipelines' claims and write-backs share,
	// however many streams are configured; 0 sizes it from the machine (AutoMaxConns).
	MaxConns int `yaml:"max_conns"`
}

// Pooler modes (Database.Pooler).
const (
	PoolerAuto        = "auto"
	PoolerNone        = "none"
	PoolerTransaction = "transaction"
)

// SessionURL is the URL for what needs a PostgreSQL session of its own:
// database.listen_url when set, else database_url.
func (c *Config) SessionURL() string {
	if c.Database.ListenURL != "" {
		return c.Database.ListenURL
	}
	return c.DatabaseURL
}

// Log configures the process logger.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Stream configures one dispatch pipeline.
type Stream struct {
	Driver         string        `yaml:"driver"`
	TopicPrefix    string        `yaml:"topic_prefix"`
	BatchSize      int           `yaml:"batch_size"`
	Concurrency    int           `yaml:"concurrency"`
	PollInterval   time.Duration `yaml:"poll_interval"`
	LeaseTTL       time.Duration `yaml:"lease_ttl"`
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	BackoffInitial time.Duration `yaml:"backoff_initial"`
	BackoffMax     time.Duration `yaml:"backoff_max"`
	MaxAttempts    int           `yaml:"max_attempts"`
	MaxDefer       time.Duration `yaml:"max_defer"`
	// Ordered delivers the messages that share a key in the order they were inserted
	// (docs/ordering.md).
	Ordered bool `yaml:"ordered"`
	// Claim is how a pipeline holds the rows it publishes: ClaimLease writes a lease on
	// them, ClaimTransaction locks them in a transaction that stays open while the batch
	// is published (docs/contract.md); ClaimAuto is transaction, or lease for an ordered
	// stream, which claims by lease only.
	Claim string `yaml:"claim"`
	// Flow lets the stream's pipeline poll every millisecond while producers notify it
	// more than FlowRate times a second, holding a lock that stops their inserts from
	// notifying, which PostgreSQL would commit one at a time (dispatch/flow.go).
	Flow bool `yaml:"flow"`
	// FlowRate is how many notifications a second start a flow. Tests and small
	// deployments lower it to make a flow (and its failure modes) reachable.
	FlowRate int `yaml:"flow_rate"`
	// TTL is how long after its INSERT a message may still be published; one still
	// undelivered then is expired instead (docs/contract.md). 0: no limit; a message's
	// own expires_at applies either way, whichever comes first.
	TTL        time.Duration `yaml:"ttl"`
	DeadLetter DeadLetter    `yaml:"dead_letter"`
	// Format frames the stream's messages: FormatRaw as the producer wrote them, or
	// FormatCloudEvents as CloudEvents in binary content mode (docs/contract.md).
	Format      string      `yaml:"format"`
	CloudEvents CloudEvents `yaml:"cloudevents"`
}

// The ways a stream may claim rows (Stream.Claim).
const (
	ClaimAuto        = "auto"
	ClaimLease       = "lease"
	ClaimTransaction = "transaction"
)

// ClaimInTransaction reports whether the stream claims by row locks held in a
// transaction (Claim, after ClaimAuto is resolved).
func (s Stream) ClaimInTransaction() bool {
	return s.Claim == ClaimTransaction || (s.Claim == ClaimAuto && !s.Ordered)
}

// The formats a stream may publish in.
const (
	FormatRaw         = "raw"
	FormatCloudEvents = "cloudevents"
)

// CloudEvents holds a cloudevents stream's defaults for what a row's headers do not say.
type CloudEvents struct {
	// Type is the event type of a row without a ce-type header; with neither, the
	// message fails for good.
	Type string `yaml:"type"`
	// Source is the event source of a row without a ce-source header; empty means
	// "/outboxd/<stream>".
	Source string `yaml:"source"`
	// SubjectFromKey sends the row's key as the subject when the row has no ce-subject.
	SubjectFromKey bool `yaml:"subject_from_key"`
}

// DeadLetter names where a stream sends messages it gives up on; both fields or neither.
type DeadLetter struct {
	Driver string `yaml:"driver"`
	Topic  string `yaml:"topic"`
	// Expired sends the stream's expired messages there too, not only failed ones.
	Expired bool `yaml:"expired"`
}

// Driver configures one destination. Type selects a registered driver type (see
// router/drivers); the other keys of the section are that type's options, decoded into
// a copy of its defaults. Options is nil only when the type is unknown.
type Driver struct {
	Type    string         `yaml:"type"`
	Options router.Options `yaml:",inline"`
}

// Janitor configures lease reclaiming, purging and partition upkeep.
type Janitor struct {
	Interval     time.Duration `yaml:"interval"`
	ReclaimBatch int           `yaml:"reclaim_batch"`
	// Retention is how long delivered rows are kept; 0 keeps none (acknowledging deletes).
	Retention  time.Duration `yaml:"retention"`
	PurgeBatch int           `yaml:"purge_batch"`
	Partitions Partitions    `yaml:"partitions"`
	// StatsInterval is how often every replica samples the backlog (no lock needed).
	StatsInterval time.Duration `yaml:"stats_interval"`
}

// Partitions configures time-partitioned outbox tables.
type Partitions struct {
	Enabled  bool          `yaml:"enabled"`
	Interval time.Duration `yaml:"interval"`
	Ahead    int           `yaml:"ahead"`
}

// HTTP configures the health, metrics and admin listener.
type HTTP struct {
	Addr string `yaml:"addr"`
	// AdminToken admits every /api/ request, reads and writes; ReadToken admits reads
	// only. Either set closes the API to requests that present neither.
	AdminToken Secret `yaml:"admin_token"`
	ReadToken  Secret `yaml:"read_token"`
	// UI serves the operators' web console at /ui/: off, on (actions with the admin
	// token) or readonly (no actions). It is never served without a token to log in with.
	UI string `yaml:"ui"`
}

// The web console's modes (http.ui).
const (
	UIOff      = "off"
	UIOn       = "on"
	UIReadonly = "readonly"
)

// Tracing configures OTLP/HTTP trace export.
type Tracing struct {
	Enabled     bool    `yaml:"enabled"`
	Endpoint    string  `yaml:"endpoint" redact:"urls"`
	SampleRatio float64 `yaml:"sample_ratio"`
	ServiceName string  `yaml:"service_name"`
	// UIURL is a trace viewer's address for one trace, {trace_id} standing for the id;
	// the web console links a message's trace there. Empty: no link.
	UIURL string `yaml:"ui_url"`
}

// Default returns every documented default. It has no streams and no drivers.
func Default() Config {
	return Config{
		DatabaseURL: "postgres://127.0.0.1:5432/postgres",
		Schema:      table.Default.Schema,
		TableName:   table.Default.Table,
		ReplicaID:   defaultReplicaID(),
		Database: Database{KeepaliveIdle: 5 * time.Second, KeepaliveInterval: 2 * time.Second, KeepaliveCount: 3, UserTimeout: 10 * time.Second,
			Pooler: PoolerAuto},
		Log: Log{Level: "info", Format: "json"},
		Janitor: Janitor{
			Interval:      30 * time.Second,
			ReclaimBatch:  1000,
			Retention:     24 * time.Hour,
			PurgeBatch:    5000,
			Partitions:    Partitions{Interval: 24 * time.Hour, Ahead: 3},
			StatsInterval: 10 * time.Second,
		},
		HTTP:    HTTP{Addr: "127.0.0.1:9600", UI: UIOff},
		Tracing: Tracing{SampleRatio: 1, ServiceName: "outboxd"},
	}
}

// defaultOutbox is the starting value of an entry of outboxes: the documented defaults
// of its schema, table, database and janitor, and no database_url.
func defaultOutbox() Outbox {
	d := Default()
	return Outbox{Schema: d.Schema, TableName: d.TableName, Database: d.Database, Janitor: d.Janitor}
}

// DefaultStream returns a stream with every documented default and no driver.
func DefaultStream() Stream {
	return Stream{
		BatchSize:      100,
		Concurrency:    2,
		PollInterval:   time.Second,
		LeaseTTL:       30 * time.Second,
		PublishTimeout: 10 * time.Second,
		BackoffInitial: time.Second,
		BackoffMax:     5 * time.Minute,
		MaxAttempts:    10,
		Flow:           true,
		FlowRate:       500,
		Format:         FormatRaw,
		Claim:          ClaimAuto,
	}
}

// Table names the outbox table.
func (c Config) Table() table.Name { return table.Name{Schema: c.Schema, Table: c.TableName} }

// FilePath returns the configuration file to read: the --config flag if given, else
// OUTBOXD_CONFIG from environ, else "" (no file).
func FilePath(flag string, environ []string) string {
	if flag != "" {
		return flag
	}
	v, _ := lookupEnv(environ, FileEnv)
	return v
}

// lookupEnv finds key in environ; like os.Getenv, the first occurrence wins.
func lookupEnv(environ []string, key string) (string, bool) {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

const maxReplicaIDLen = 64

// defaultReplicaID is hostname-pid, shortened and cleaned so that it always validates.
func defaultReplicaID() string {
	pid := "-" + strconv.Itoa(os.Getpid())
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "outboxd"
	}
	host = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, host)
	for utf8.RuneCountInString(host)+len(pid) > maxReplicaIDLen {
		_, size := utf8.DecodeLastRuneInString(host)
		host = host[:len(host)-size]
	}
	return host + pid
}
