package config

import (
	"maps"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outboxd/internal/pgdsn"
	"github.com/outboxd/outboxd/table"
)

// Validate checks every setting and every rule between settings and returns nil or a
// *Problems listing all of them. Having no streams is valid here (outboxd migrate needs
// none); see RequireStreams.
func (c *Config) Validate() error {
	v := &checker{}
	v.dsn("database_url", c.DatabaseURL)
	v.ident("schema", c.Schema)
	v.ident("table", c.TableName)
	if table.CheckIdent(c.Schema) == nil && table.CheckIdent(c.TableName) == nil {
		if err := table.CheckChannel(c.Table()); err != nil {
			v.add("table", "%s", strings.TrimPrefix(err.Error(), "table: "))
		}
	}
	v.replicaID("replica_id", c.ReplicaID)
	if c.Database.ConnectTimeout < 0 {
		v.add("database.connect_timeout", "must not be negative (0 waits for the database forever), got %s",
			formatDuration(c.Database.ConnectTimeout))
	}
	v.database("database", c.Database)
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "json", "text")
	for _, name := range slices.Sorted(maps.Keys(c.Drivers)) {
		v.driver(join("drivers", name), name, c.Drivers[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Streams)) {
		v.stream(join("streams", name), name, c.Streams[name], c.Drivers, c.Streams)
	}
	v.janitor("janitor", c.Janitor)
	v.http("http", c.HTTP)
	v.tracing("tracing", c.Tracing)
	return v.err()
}

// RequireStreams reports a problem when no stream is configured; outboxd run has
// nothing to do without one.
func (c *Config) RequireStreams() error {
	if len(c.Streams) > 0 {
		return nil
	}
	v := &checker{}
	v.add("streams", "no streams configured; outboxd run needs at least one")
	return v.err()
}

type checker struct{ problems }

func (v *checker) ident(key, s string) {
	if err := table.CheckIdent(s); err != nil {
		v.add(key, "%v", err)
	}
}

func (v *checker) name(key, what, s string) {
	// The producer client refuses the same stream names (table.CheckStream).
	if table.CheckStream(s) != nil {
		v.add(key, "%s name %s must be 1 to 63 lower-case letters, digits, '.', '_' or '-', start with a letter or digit, and hold no \"__\"", what, quoteShort(s))
	}
}

func (v *checker) required(key, s string) bool {
	if s == "" {
		v.add(key, "required")
		return false
	}
	return true
}

func (v *checker) oneOf(key, s string, allowed ...string) {
	if !slices.Contains(allowed, s) {
		v.add(key, "want one of %s; got %s", strings.Join(allowed, ", "), quoteShort(s))
	}
}

func (v *checker) intRange(key string, n, lo, hi int) bool {
	if n < lo || n > hi {
		v.add(key, "must be between %d and %d, got %d", lo, hi, n)
		return false
	}
	return true
}

func (v *checker) durRange(key string, d, lo, hi time.Duration) bool {
	if d < lo || d > hi {
		v.add(key, "must be between %s and %s, got %s", formatDuration(lo), formatDuration(hi), formatDuration(d))
		return false
	}
	return true
}

func (v *checker) positive(key string, d time.Duration) bool {
	if d <= 0 {
		v.add(key, "must be positive, got %s", formatDuration(d))
		return false
	}
	return true
}

// secret rejects the placeholder that redacted output shows: it means someone copied
// `outboxd config check` output into the file.
func (v *checker) secret(key string, s Secret) {
	if s.Reveal() == mask {
		v.add(key, "holds the placeholder %s, not a secret", mask)
	}
}

// placeholder rejects the mask in a string that may embed credentials.
func (v *checker) placeholder(key, s string) bool {
	if strings.Contains(s, mask) {
		v.add(key, "holds the placeholder %s where a credential belongs", mask)
		return true
	}
	return false
}

func (v *checker) dsn(key, s string) {
	switch {
	case v.placeholder(key, s):
	case s == "":
		v.add(key, "required: a postgres:// URL or key=value pairs")
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil {
			v.add(key, "not a valid URL: %s", urlParseProblem(s, false))
			return
		}
		if u.Scheme != "postgres" && u.Scheme != "postgresql" {
			v.add(key, "want a postgres:// or postgresql:// URL, got scheme %s", quoteShort(u.Scheme))
		}
		v.dsnParams(key, u.Port(), u.Query().Get("sslmode"))
	default:
		pairs, err := pgdsn.ParseKV(s)
		if err != nil {
			v.add(key, "neither a postgres:// URL nor key=value pairs: %v", err)
			return
		}
		var port, sslmode string
		for _, p := range pairs {
			switch p.Key {
			case "port":
				port = pgdsn.Value(s[p.Start:p.End])
			case "sslmode":
				sslmode = pgdsn.Value(s[p.Start:p.End])
			}
		}
		v.dsnParams(key, port, sslmode)
	}
}

// sslModes are the values of sslmode that libpq and pgx know.
var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// dsnParams checks the DSN parameters a mistake in which only shows when outboxd
// connects (and then in pgx's words, which quote the DSN): the port and sslmode. A
// comma-separated port list, as for several hosts, is checked item by item.
func (v *checker) dsnParams(key, port, sslmode string) {
	for p := range strings.SplitSeq(port, ",") {
		if p == "" {
			continue
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			v.add(key, "the port must be a number from 1 to 65535, got %s", quoteShort(p))
		}
	}
	if sslmode != "" && !slices.Contains(sslModes, sslmode) {
		v.add(key, "sslmode must be one of %s, got %s", strings.Join(sslModes, ", "), quoteShort(sslmode))
	}
}

func (v *checker) replicaID(key, s string) {
	n := utf8.RuneCountInString(s)
	ok := utf8.ValidString(s) && n >= 1 && n <= maxReplicaIDLen
	for _, r := range s {
		ok = ok && unicode.IsPrint(r) && !unicode.IsSpace(r)
	}
	if !ok {
		v.add(key, "must be 1 to %d printable characters without spaces", maxReplicaIDLen)
	}
}

func (v *checker) stream(key, name string, s Stream, drivers map[string]Driver, streams map[string]Stream) {
	v.name(key, "stream", name)
	k := func(f string) string { return key + "." + f }
	if v.required(k("driver"), s.Driver) {
		v.driverRef(k("driver"), s.Driver, drivers)
	}
	v.intRange(k("batch_size"), s.BatchSize, 1, 10000)
	v.intRange(k("concurrency"), s.Concurrency, 1, 64)
	v.durRange(k("poll_interval"), s.PollInterval, 10*time.Millisecond, time.Hour)
	leaseOK := v.durRange(k("lease_ttl"), s.LeaseTTL, time.Second, 24*time.Hour)
	publishOK := v.durRange(k("publish_timeout"), s.PublishTimeout, 100*time.Millisecond, 10*time.Minute)
	if leaseOK && publishOK && s.LeaseTTL <= s.PublishTimeout {
		v.add(k("lease_ttl"), "must exceed publish_timeout (%s), or a lease could expire mid-publish; got %s",
			formatDuration(s.PublishTimeout), formatDuration(s.LeaseTTL))
	}
	if v.positive(k("backoff_initial"), s.BackoffInitial) && s.BackoffMax < s.BackoffInitial {
		v.add(k("backoff_max"), "must be at least backoff_initial (%s), got %s",
			formatDuration(s.BackoffInitial), formatDuration(s.BackoffMax))
	}
	v.intRange(k("max_attempts"), s.MaxAttempts, 1, 1000)
	v.intRange(k("flow_rate"), s.FlowRate, 1, 1_000_000)
	if s.MaxDefer != 0 && s.MaxDefer < time.Second {
		v.add(k("max_defer"), "must be 0 (unbounded) or at least 1s, got %s", formatDuration(s.MaxDefer))
	}
	switch dl := s.DeadLetter; {
	case dl.Driver != "" && dl.Topic == "":
		v.add(k("dead_letter.topic"), "required when dead_letter.driver is set")
	case dl.Driver == "" && dl.Topic != "":
		v.add(k("dead_letter.driver"), "required when dead_letter.topic is set")
	}
	if s.DeadLetter.Driver != "" {
		v.driverRef(k("dead_letter.driver"), s.DeadLetter.Driver, drivers)
	}
	v.deadLetterCollision(k("dead_letter.topic"), s.DeadLetter, streams, drivers)
	if d, ok := drivers[s.Driver]; ok && d.Type == TypeJetStream && d.Provision.Enabled && !strings.HasSuffix(s.TopicPrefix, ".") {
		v.add(k("topic_prefix"), "must end with '.' when drivers.%s.provision.enabled is true, so that the JetStream stream "+
			"it creates can capture \"<topic_prefix>>\"; got %s", s.Driver, quoteShort(s.TopicPrefix))
	}
}

// streamNamePattern is what a provisioned JetStream stream may be called: a name the
// server takes that is also a single subject token.
var streamNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (v *checker) provision(key string, d Driver) {
	k := func(f string) string { return key + ".provision." + f }
	p := d.Provision
	switch d.Type {
	case TypeKafka:
		v.intRange(k("partitions"), p.Partitions, 1, 10000)
		v.intRange(k("replication_factor"), p.ReplicationFactor, 1, 32)
	case TypeJetStream:
		if p.Enabled && p.Stream == "" {
			v.add(k("stream"), "required when provision.enabled is true: the name of the JetStream stream to create")
		} else if p.Stream != "" && !streamNamePattern.MatchString(p.Stream) {
			v.add(k("stream"), "must be 1 to 64 ASCII letters, digits, '_' or '-'; got %s", quoteShort(p.Stream))
		}
		v.oneOf(k("retention"), p.Retention, "limits", "interest", "workqueue")
		v.oneOf(k("storage"), p.Storage, "file", "memory")
		v.intRange(k("replicas"), p.Replicas, 1, 5)
		v.durRange(k("duplicate_window"), p.DuplicateWindow, time.Second, 7*24*time.Hour)
	}
}

// deadLetterCollision refuses, on NATS and JetStream, a dead-letter subject among the
// ordinary subjects of a stream publishing through the same driver: a stream's subject is
// "<topic_prefix><topic>", and NATS consumers take a stream's messages by wildcard
// (prefix.>), so they would receive its dead letters as ordinary messages, and a
// JetStream stream capturing the prefix would store them beside them. Kafka consumers
// name their topics, so a dead-letter topic under the prefix ("orders.dead") is a topic
// of its own there. Streams without a prefix are not checked: their rows may name any
// subject.
func (v *checker) deadLetterCollision(key string, dl DeadLetter, streams map[string]Stream, drivers map[string]Driver) {
	if dl.Driver == "" || dl.Topic == "" {
		return
	}
	if t := drivers[dl.Driver].Type; t != TypeNATS && t != TypeJetStream {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(streams)) {
		s := streams[name]
		if s.Driver == dl.Driver && s.TopicPrefix != "" && strings.HasPrefix(dl.Topic, s.TopicPrefix) {
			v.add(key, "%s lies among the subjects of stream %s (driver %s, topic_prefix %s): its consumers would "+
				"receive dead letters as ordinary messages; choose a subject outside that prefix",
				quoteShort(dl.Topic), quoteShort(name), quoteShort(dl.Driver), quoteShort(s.TopicPrefix))
			return
		}
	}
}

func (v *checker) driverRef(key, name string, drivers map[string]Driver) {
	if _, ok := drivers[name]; !ok {
		v.add(key, "no driver named %s is configured under drivers", quoteShort(name))
	}
}

func (v *checker) driver(key, name string, d Driver) {
	v.name(key, "driver", name)
	k := func(f string) string { return key + "." + f }
	if !v.required(k("type"), d.Type) {
		return
	}
	if !knownType(d.Type) {
		v.oneOf(k("type"), d.Type, TypeKafka, TypeNATS, TypeJetStream, TypeDiscard)
		return
	}
	eachLeaf(reflect.ValueOf(d), key, nil, func(path string, leaf reflect.Value, _ field, only []string) {
		if !allows(only, d.Type) && !leaf.IsZero() {
			v.add(path, "%s", onlyText(only))
		}
	})
	if d.Type == TypeDiscard {
		if d.TLS != (TLS{}) {
			v.add(k("tls"), "not used by type discard, which connects to nothing")
		}
		return
	}
	v.tls(k("tls"), d.TLS)
	if d.Type == TypeKafka || d.Type == TypeJetStream {
		v.provision(key, d)
	}
	if d.Type == TypeKafka {
		v.kafka(key, d)
		return
	}
	v.nats(key, d)
}

func (v *checker) kafka(key string, d Driver) {
	k := func(f string) string { return key + "." + f }
	if len(d.Brokers) == 0 {
		v.add(k("brokers"), "required: at least one host:port")
	}
	for i, b := range d.Brokers {
		if msg := hostPortProblem(b, false); msg != "" {
			v.add(k("brokers"), "item %d: want host:port, got %s: %s", i+1, quoteShort(b), msg)
		}
	}
	v.oneOf(k("compression"), d.Compression, "none", "gzip", "snappy", "lz4", "zstd")
	v.positive(k("write_timeout"), d.WriteTimeout)
	v.oneOf(k("sasl.mechanism"), d.SASL.Mechanism, "", "plain", "scram-sha-256", "scram-sha-512")
	v.secret(k("sasl.password"), d.SASL.Password)
	if d.SASL.Mechanism != "" {
		if d.SASL.Username == "" {
			v.add(k("sasl.username"), "required when sasl.mechanism is set")
		}
		if d.SASL.Password == "" {
			v.add(k("sasl.password"), "required when sasl.mechanism is set")
		}
	} else if d.SASL.Username != "" || d.SASL.Password != "" {
		v.add(k("sasl.mechanism"), "required when sasl.username or sasl.password is set")
	}
}

func (v *checker) nats(key string, d Driver) {
	k := func(f string) string { return key + "." + f }
	if v.required(k("url"), d.URL) && !v.placeholder(k("url"), d.URL) {
		for i, raw := range strings.Split(d.URL, ",") {
			if msg := natsURLProblem(strings.TrimSpace(raw)); msg != "" {
				v.add(k("url"), "server %d (%s): %s", i+1, quoteShort(pgdsn.RedactURL(strings.TrimSpace(raw), mask, true)), msg)
			}
		}
	}
	v.secret(k("token"), d.Token)
	v.secret(k("password"), d.Password)
	if (d.Username == "") != (d.Password == "") {
		v.add(k("username"), "username and password go together; set both or neither")
	}
	methods := 0
	for _, set := range []bool{d.Token != "", d.Username != "" || d.Password != "", d.CredsFile != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		v.add(k("token"), "choose one way to authenticate: token, username and password, or creds_file")
	}
	v.positive(k("publish_timeout"), d.PublishTimeout)
	if d.Type == TypeJetStream {
		v.intRange(k("max_in_flight"), d.MaxInFlight, 1, 65536)
	}
}

func natsURLProblem(s string) string {
	if s == "" {
		return "empty; separate servers with single commas"
	}
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return urlParseProblem(s, true)
	}
	if !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) {
		return "want scheme nats, tls, ws or wss"
	}
	if u.Host == "" {
		return "no host"
	}
	return ""
}

func (v *checker) tls(key string, t TLS) {
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"insecure_skip_verify", t.InsecureSkipVerify}} {
			if f.set {
				v.add(key+"."+f.name, "set, but tls.enabled is false")
			}
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		v.add(key+".cert_file", "cert_file and key_file go together; set both or neither")
	}
}

func (v *checker) janitor(key string, j Janitor) {
	k := func(f string) string { return key + "." + f }
	v.positive(k("interval"), j.Interval)
	v.intRange(k("reclaim_batch"), j.ReclaimBatch, 1, 100000)
	if j.Retention < 0 {
		v.add(k("retention"), "must not be negative (0 purges delivered rows on the next run), got %s", formatDuration(j.Retention))
	}
	v.intRange(k("purge_batch"), j.PurgeBatch, 1, 100000)
	if j.Partitions.Interval < time.Hour {
		v.add(k("partitions.interval"), "must be at least 1h, got %s", formatDuration(j.Partitions.Interval))
	}
	v.intRange(k("partitions.ahead"), j.Partitions.Ahead, 1, 365)
	v.positive(k("stats_interval"), j.StatsInterval)
}

func (v *checker) database(key string, d Database) {
	k := func(f string) string { return key + "." + f }
	// The server takes the keepalive settings in whole seconds and tcp_user_timeout in
	// milliseconds; a value it would round is refused rather than changed silently.
	seconds := func(key string, d time.Duration) {
		if d%time.Second != 0 {
			v.add(key, "must be a whole number of seconds, got %s", formatDuration(d))
		}
	}
	if v.durRange(k("keepalive_idle"), d.KeepaliveIdle, time.Second, 2*time.Hour) {
		seconds(k("keepalive_idle"), d.KeepaliveIdle)
	}
	if v.durRange(k("keepalive_interval"), d.KeepaliveInterval, time.Second, 10*time.Minute) {
		seconds(k("keepalive_interval"), d.KeepaliveInterval)
	}
	v.intRange(k("keepalive_count"), d.KeepaliveCount, 1, 100)
	if d.UserTimeout != 0 && v.durRange(k("user_timeout"), d.UserTimeout, time.Second, time.Hour) && d.UserTimeout%time.Millisecond != 0 {
		v.add(k("user_timeout"), "must be a whole number of milliseconds, got %s", formatDuration(d.UserTimeout))
	}
}

func (v *checker) http(key string, h HTTP) {
	if h.Addr != "" {
		if msg := hostPortProblem(h.Addr, true); msg != "" {
			v.add(key+".addr", "want host:port (or \"\" to disable), got %s: %s", quoteShort(h.Addr), msg)
		}
	}
	v.secret(key+".admin_token", h.AdminToken)
	if h.AdminToken != "" && utf8.RuneCountInString(h.AdminToken.Reveal()) < 16 {
		v.add(key+".admin_token", "must be at least 16 characters long")
	}
	v.secret(key+".read_token", h.ReadToken)
	if h.ReadToken != "" && utf8.RuneCountInString(h.ReadToken.Reveal()) < 16 {
		v.add(key+".read_token", "must be at least 16 characters long")
	}
	// The same value in both would make every holder of the read token an admin.
	if h.ReadToken != "" && h.ReadToken == h.AdminToken {
		v.add(key+".read_token", "must differ from http.admin_token, or the read token would allow writes")
	}
}

// hostPortProblem checks a host:port; a listener may leave the host empty (all
// interfaces) and use port 0 (any free port).
func hostPortProblem(s string, listen bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return strings.TrimPrefix(err.Error(), "address "+s+": ")
	}
	if host == "" && !listen {
		return "no host"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !listen) {
		return "port must be a number from 1 to 65535"
	}
	return ""
}

func (v *checker) tracing(key string, t Tracing) {
	k := func(f string) string { return key + "." + f }
	if t.Enabled && t.Endpoint == "" {
		v.add(k("endpoint"), "required when tracing.enabled is true")
	}
	if t.Endpoint != "" && !v.placeholder(k("endpoint"), t.Endpoint) {
		if msg := endpointProblem(t.Endpoint); msg != "" {
			v.add(k("endpoint"), "want an http:// or https:// URL, got %s: %s", quoteShort(pgdsn.RedactURL(t.Endpoint, mask, true)), msg)
		}
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		v.add(k("sample_ratio"), "must be between 0 and 1, got %v", t.SampleRatio)
	}
	v.required(k("service_name"), t.ServiceName)
}

func endpointProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return urlParseProblem(s, true)
	case u.Scheme != "http" && u.Scheme != "https":
		return "the scheme must be http or https"
	case u.Host == "":
		return "no host"
	}
	return ""
}

// formatDuration prints a duration the way people write one: 5m, not 5m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
