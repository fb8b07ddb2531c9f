package postgres

import (
	"strings"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/table"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "postgres"

// Defaults the options hold until configured; New also falls back to them for a zero
// value.
const (
	DefaultTable          = "public.outboxd_inbox"
	DefaultMaxConns       = 4
	DefaultPublishTimeout = 5 * time.Second
	// DefaultMaxPayloadBytes keeps a message far below PostgreSQL's 1 GB limit on a
	// bytea value and on one protocol message, and below what a server can reasonably
	// hold in memory while it unpacks the batch's arrays.
	DefaultMaxPayloadBytes = 64 << 20
)

// maxPayloadLimit bounds max_payload_bytes: one message is one bind message to the
// server, which refuses a message of 1 GB or more, and the key, headers and array
// framing travel with the payload.
const maxPayloadLimit = 512 << 20

// Options configure the PostgreSQL inbox driver.
type Options struct {
	// URL is the DSN of the database holding the inbox, as a postgres:// URL or
	// key=value pairs. It may hold a password: configuration output redacts it, and
	// the driver never prints it unredacted.
	URL string `yaml:"url" redact:"dsn"`
	// Table is the inbox, schema-qualified: "schema.table".
	Table           string        `yaml:"table"`
	MaxConns        int           `yaml:"max_conns"`
	PublishTimeout  time.Duration `yaml:"publish_timeout"`
	MaxPayloadBytes int           `yaml:"max_payload_bytes"`
}

// DefaultOptions returns the documented defaults; there is no default database.
func DefaultOptions() Options {
	return Options{
		Table:           DefaultTable,
		MaxConns:        DefaultMaxConns,
		PublishTimeout:  DefaultPublishTimeout,
		MaxPayloadBytes: DefaultMaxPayloadBytes,
	}
}

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	c.DSN("url", o.URL)
	if _, err := ParseTable(o.Table); err != nil {
		c.Add("table", "%v", err)
	}
	c.IntRange("max_conns", o.MaxConns, 1, 100)
	c.DurRange("publish_timeout", o.PublishTimeout, 100*time.Millisecond, 10*time.Minute)
	c.IntRange("max_payload_bytes", o.MaxPayloadBytes, 1, maxPayloadLimit)
	return c.Problems
}

// Summary names the database; the caller redacts the DSN before showing it.
func (o Options) Summary() router.Summary {
	return router.Summary{Servers: []string{o.URL}}
}

// ParseTable reads a schema-qualified inbox name, "schema.table", each part a plain
// identifier by the rule the outbox table follows (table.CheckIdent).
func ParseTable(s string) (table.Name, error) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok {
		return table.Name{}, &tableError{s, "want schema.table, such as " + DefaultTable}
	}
	if err := table.CheckIdent(schema); err != nil {
		return table.Name{}, &tableError{s, "schema: " + err.Error()}
	}
	if err := table.CheckIdent(name); err != nil {
		return table.Name{}, &tableError{s, "table: " + err.Error()}
	}
	return table.Name{Schema: schema, Table: name}, nil
}

type tableError struct{ name, why string }

func (e *tableError) Error() string { return driveropt.Quote(e.name) + ": " + e.why }
