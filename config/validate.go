package config

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outboxd/internal/pgdsn"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/table"
)

// Validate checks every setting and every rule between settings and returns nil or a
// *Problems listing all of them. Having no streams is valid here (outboxd migrate needs
// none); see RequireStreams.
func (c *Config) Validate() error {
	v := &checker{}
	v.DSN("database_url", c.DatabaseURL)
	v.ident("schema", c.Schema)
	v.ident("table", c.TableName)
	if table.CheckIdent(c.Schema) == nil && table.CheckIdent(c.TableName) == nil {
		if err := table.CheckChannel(c.Table()); err != nil {
			v.Add("table", "%s", strings.TrimPrefix(err.Error(), "table: "))
		}
	}
	v.replicaID("replica_id", c.ReplicaID)
	v.database("database", c.Database)
	v.OneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.OneOf("log.format", c.Log.Format, "json", "text")
	for _, name := range slices.Sorted(maps.Keys(c.Drivers)) {
		v.driver(join("drivers", name), name, c.Drivers[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Streams)) {
		v.stream(join("streams", name), name, c.Streams[name], c.Drivers, c.Streams)
	}
	v.janitor("janitor", c.Janitor)
	if len(c.Outboxes) > 0 {
		if len(c.Streams) > 0 {
			v.Add("streams", "set together with outboxes: with outboxes, each entry lists its own streams (outboxes[<n>].streams)")
		}
		v.outboxes(c)
	}
	v.http("http", c.HTTP)
	v.tracing("tracing", c.Tracing)
	return v.err()
}

// RequireStreams reports a problem when no stream is configured; outboxd run has
// nothing to do without one.
func (c *Config) RequireStreams() error {
	v := &checker{}
	if len(c.Outboxes) == 0 && len(c.Streams) == 0 {
		v.Add("streams", "no streams configured; outboxd run needs at least one")
	}
	for i, o := range c.Outboxes {
		if len(o.Streams) == 0 {
			v.Add(entryPath("outboxes", i)+".streams", "no streams configured for outbox %s; each outbox needs at least one", quoteShort(o.Name))
		}
	}
	return v.err()
}

// checker words its problems as the drivers' options do: it is their Checker.
type checker struct{ driveropt.Checker }

func (v *checker) err() error {
	ps := problems{list: v.Problems}
	return ps.err()
}

func (v *checker) ident(key, s string) {
	if err := table.CheckIdent(s); err != nil {
		v.Add(key, "%v", err)
	}
}

func (v *checker) name(key, what, s string) {
	// The producer client refuses the same stream names (table.CheckStream).
	if table.CheckStream(s) != nil {
		v.Add(key, "%s name %s must be 1 to 63 lower-case letters, digits, '.', '_' or '-', start with a letter or digit, and hold no \"__\"", what, quoteShort(s))
	}
}

func (v *checker) replicaID(key, s string) {
	n := utf8.RuneCountInString(s)
	ok := utf8.ValidString(s) && n >= 1 && n <= maxReplicaIDLen
	for _, r := range s {
		ok = ok && unicode.IsPrint(r) && !unicode.IsSpace(r)
	}
	if !ok {
		v.Add(key, "must be 1 to %d printable characters without spaces", maxReplicaIDLen)
	}
}

func (v *checker) stream(key, name string, s Stream, drivers map[string]Driver, streams map[string]Stream) {
	v.name(key, "stream", name)
	k := func(f string) string { return key + "." + f }
	if v.Required(k("driver"), s.Driver) {
		v.driverRef(k("driver"), s.Driver, drivers)
	}
	v.IntRange(k("batch_size"), s.BatchSize, 1, 10000)
	v.IntRange(k("concurrency"), s.Concurrency, 1, 64)
	v.DurRange(k("poll_interval"), s.PollInterval, 10*time.Millisecond, time.Hour)
	leaseOK := v.DurRange(k("lease_ttl"), s.LeaseTTL, time.Second, 24*time.Hour)
	publishOK := v.DurRange(k("publish_timeout"), s.PublishTimeout, 100*time.Millisecond, 10*time.Minute)
	if leaseOK && publishOK && s.LeaseTTL <= s.PublishTimeout {
		v.Add(k("lease_ttl"), "must exceed publish_timeout (%s), or a lease could expire mid-publish; got %s",
			formatDuration(s.PublishTimeout), formatDuration(s.LeaseTTL))
	}
	if v.Positive(k("backoff_initial"), s.BackoffInitial) && s.BackoffMax < s.BackoffInitial {
		v.Add(k("backoff_max"), "must be at least backoff_initial (%s), got %s",
			formatDuration(s.BackoffInitial), formatDuration(s.BackoffMax))
	}
	v.IntRange(k("max_attempts"), s.MaxAttempts, 1, 1000)
	v.IntRange(k("flow_rate"), s.FlowRate, 1, 1_000_000)
	if s.MaxDefer != 0 && s.MaxDefer < time.Second {
		v.Add(k("max_defer"), "must be 0 (unbounded) or at least 1s, got %s", formatDuration(s.MaxDefer))
	}
	if s.TTL < 0 || (s.TTL > 0 && s.TTL < time.Second) {
		v.Add(k("ttl"), "must be 0 (no expiry) or at least 1s, got %s", formatDuration(s.TTL))
	}
	switch dl := s.DeadLetter; {
	case dl.Expired && dl.Driver == "":
		v.Add(k("dead_letter.expired"), "needs dead_letter.driver and dead_letter.topic: there is nowhere to send expired messages")
	case dl.Driver != "" && dl.Topic == "":
		v.Add(k("dead_letter.topic"), "required when dead_letter.driver is set")
	case dl.Driver == "" && dl.Topic != "":
		v.Add(k("dead_letter.driver"), "required when dead_letter.topic is set")
	}
	if s.DeadLetter.Driver != "" {
		v.driverRef(k("dead_letter.driver"), s.DeadLetter.Driver, drivers)
	}
	v.deadLetterCollision(k("dead_letter.topic"), s.DeadLetter, streams, drivers)
	v.format(key, s)
	v.OneOf(k("claim"), s.Claim, ClaimAuto, ClaimLease, ClaimTransaction)
	if s.Ordered && s.Claim == ClaimTransaction {
		v.Add(k("claim"), "must be lease or auto for an ordered stream (ordered: true): its keys are held by leases; got transaction")
	}
	if rules, ok := drivers[s.Driver].Options.(router.RouteRules); ok {
		if msg := rules.CheckPrefix(s.Driver, s.TopicPrefix); msg != "" {
			v.Add(k("topic_prefix"), "%s", msg)
		}
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
	if rules, ok := drivers[dl.Driver].Options.(router.RouteRules); !ok || !rules.PrefixWildcards() {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(streams)) {
		s := streams[name]
		if s.Driver == dl.Driver && s.TopicPrefix != "" && strings.HasPrefix(dl.Topic, s.TopicPrefix) {
			v.Add(key, "%s lies among the subjects of stream %s (driver %s, topic_prefix %s): its consumers would "+
				"receive dead letters as ordinary messages; choose a subject outside that prefix",
				quoteShort(dl.Topic), quoteShort(name), quoteShort(dl.Driver), quoteShort(s.TopicPrefix))
			return
		}
	}
}

func (v *checker) driverRef(key, name string, drivers map[string]Driver) {
	if _, ok := drivers[name]; !ok {
		v.Add(key, "no driver named %s is configured under drivers", quoteShort(name))
	}
}

func (v *checker) driver(key, name string, d Driver) {
	v.name(key, "driver", name)
	if !v.Required(key+".type", d.Type) {
		return
	}
	if d.Options == nil {
		v.Add(key+".type", "no driver of type %s is registered", quoteShort(d.Type))
		return
	}
	v.Nest(key, d.Options.Validate())
}

func (v *checker) janitor(key string, j Janitor) {
	k := func(f string) string { return key + "." + f }
	v.Positive(k("interval"), j.Interval)
	v.IntRange(k("reclaim_batch"), j.ReclaimBatch, 1, 100000)
	if j.Retention < 0 {
		v.Add(k("retention"), "must not be negative (0 purges delivered rows on the next run), got %s", formatDuration(j.Retention))
	}
	v.IntRange(k("purge_batch"), j.PurgeBatch, 1, 100000)
	if j.Partitions.Interval < time.Hour {
		v.Add(k("partitions.interval"), "must be at least 1h, got %s", formatDuration(j.Partitions.Interval))
	}
	v.IntRange(k("partitions.ahead"), j.Partitions.Ahead, 1, 365)
	v.Positive(k("stats_interval"), j.StatsInterval)
}

func (v *checker) database(key string, d Database) {
	k := func(f string) string { return key + "." + f }
	if d.ListenURL != "" {
		v.DSN(k("listen_url"), d.ListenURL)
	}
	v.OneOf(k("pooler"), d.Pooler, PoolerAuto, PoolerNone, PoolerTransaction)
	if d.Pooler == PoolerTransaction && d.ListenURL == "" {
		v.Add(k("listen_url"), "required when %s is transaction: a direct PostgreSQL URL, bypassing the pooler, for LISTEN and the session locks", k("pooler"))
	}
	if d.ConnectTimeout < 0 {
		v.Add(k("connect_timeout"), "must not be negative (0 waits for the database forever), got %s",
			formatDuration(d.ConnectTimeout))
	}
	// The server takes the keepalive settings in whole seconds and tcp_user_timeout in
	// milliseconds; a value it would round is refused rather than changed silently.
	seconds := func(key string, d time.Duration) {
		if d%time.Second != 0 {
			v.Add(key, "must be a whole number of seconds, got %s", formatDuration(d))
		}
	}
	if v.DurRange(k("keepalive_idle"), d.KeepaliveIdle, time.Second, 2*time.Hour) {
		seconds(k("keepalive_idle"), d.KeepaliveIdle)
	}
	if v.DurRange(k("keepalive_interval"), d.KeepaliveInterval, time.Second, 10*time.Minute) {
		seconds(k("keepalive_interval"), d.KeepaliveInterval)
	}
	v.IntRange(k("keepalive_count"), d.KeepaliveCount, 1, 100)
	if d.MaxConns != 0 {
		v.IntRange(k("max_conns"), d.MaxConns, 2, 1000)
	}
	if d.UserTimeout != 0 && v.DurRange(k("user_timeout"), d.UserTimeout, time.Second, time.Hour) && d.UserTimeout%time.Millisecond != 0 {
		v.Add(k("user_timeout"), "must be a whole number of milliseconds, got %s", formatDuration(d.UserTimeout))
	}
}

func (v *checker) http(key string, h HTTP) {
	if h.Addr != "" {
		if msg := hostPortProblem(h.Addr, true); msg != "" {
			v.Add(key+".addr", "want host:port (or \"\" to disable), got %s: %s", quoteShort(h.Addr), msg)
		}
	}
	v.Secret(key+".admin_token", h.AdminToken)
	if h.AdminToken != "" && utf8.RuneCountInString(h.AdminToken.Reveal()) < 16 {
		v.Add(key+".admin_token", "must be at least 16 characters long")
	}
	v.Secret(key+".read_token", h.ReadToken)
	if h.ReadToken != "" && utf8.RuneCountInString(h.ReadToken.Reveal()) < 16 {
		v.Add(key+".read_token", "must be at least 16 characters long")
	}
	// The same value in both would make every holder of the read token an admin.
	if h.ReadToken != "" && h.ReadToken == h.AdminToken {
		v.Add(key+".read_token", "must differ from http.admin_token, or the read token would allow writes")
	}
	// A console is never open without a token: its login is the token.
	if h.UI != "" { // the zero value is off
		v.OneOf(key+".ui", h.UI, UIOff, UIOn, UIReadonly)
	}
	switch {
	case h.UI == UIOn && h.AdminToken == "":
		v.Add(key+".ui", "on needs http.admin_token (the console's actions and login); set it, or use readonly with http.read_token, or off")
	case h.UI == UIReadonly && h.AdminToken == "" && h.ReadToken == "":
		v.Add(key+".ui", "readonly needs http.read_token or http.admin_token to log in with; set one, or use off")
	}
}

func hostPortProblem(s string, listen bool) string { return driveropt.HostPortProblem(s, listen) }

func (v *checker) tracing(key string, t Tracing) {
	k := func(f string) string { return key + "." + f }
	if t.Enabled && t.Endpoint == "" {
		v.Add(k("endpoint"), "required when tracing.enabled is true")
	}
	if t.Endpoint != "" && !v.Placeholder(k("endpoint"), t.Endpoint) {
		if msg := endpointProblem(t.Endpoint); msg != "" {
			v.Add(k("endpoint"), "want an http:// or https:// URL, got %s: %s", quoteShort(pgdsn.RedactURL(t.Endpoint, mask, true)), msg)
		}
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		v.Add(k("sample_ratio"), "must be between 0 and 1, got %v", t.SampleRatio)
	}
	v.Required(k("service_name"), t.ServiceName)
	if t.UIURL != "" {
		switch {
		case !strings.Contains(t.UIURL, "{trace_id}"):
			v.Add(k("ui_url"), "must hold {trace_id} where the trace id goes, e.g. http://127.0.0.1:16686/trace/{trace_id}")
		default:
			if msg := endpointProblem(strings.ReplaceAll(t.UIURL, "{trace_id}", "0")); msg != "" {
				v.Add(k("ui_url"), "want an http:// or https:// URL, got %s: %s", quoteShort(t.UIURL), msg)
			}
		}
	}
}

func endpointProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return driveropt.URLParseProblem(s, true)
	case u.Scheme != "http" && u.Scheme != "https":
		return "the scheme must be http or https"
	case u.Host == "":
		return "no host"
	}
	return ""
}

// formatDuration prints a duration the way people write one: 5m, not 5m0s.
func formatDuration(d time.Duration) string { return driveropt.FormatDuration(d) }

// format checks a stream's format and its CloudEvents defaults.
func (v *checker) format(key string, s Stream) {
	k := func(f string) string { return key + "." + f }
	v.OneOf(k("format"), s.Format, FormatRaw, FormatCloudEvents)
	ce := s.CloudEvents
	if s.Format != FormatCloudEvents {
		if ce != (CloudEvents{}) {
			v.Add(k("cloudevents"), "is set but format is %s: set format: cloudevents, or remove it", quoteShort(s.Format))
		}
		return
	}
	if ce.Type != "" && strings.TrimSpace(ce.Type) != ce.Type {
		v.Add(k("cloudevents.type"), "must not begin or end with whitespace")
	}
	if ce.Source != "" {
		if _, err := url.Parse(ce.Source); err != nil || strings.ContainsAny(ce.Source, " \t\r\n") {
			v.Add(k("cloudevents.source"), "must be a URI-reference (no spaces), got %s", quoteShort(ce.Source))
		}
	}
}
