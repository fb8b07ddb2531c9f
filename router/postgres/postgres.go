// Package postgres publishes outbox messages into a table of a PostgreSQL database: a
// consumer's inbox (docs/sql/inbox.sql creates one).
//
// Invariant: a nil result means the row is committed, and every message is in the inbox
// at most once. One Publish is one INSERT … SELECT FROM unnest(…) over the batch, as
// arrays, in one round trip and one transaction (a batch too large for one statement
// goes as several statements in one pipeline, still one transaction). A message
// published again is refused by the primary key, and the batch goes again with ON
// CONFLICT (message_id) DO NOTHING: absorbed and counted as a duplicate, never inserted
// twice. Rows take the inbox's identity column in batch order. What the database would refuse of a single message
// (no topic, a NUL byte or invalid UTF-8 in text, a payload over max_payload_bytes) is
// refused before anything is sent (Check); when the database still refuses the batch
// for its data, the batch is inserted again message by message, so that the bad message
// fails alone and permanently.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration. The DSN may hold a password: no error or log line
// of this package carries it unredacted (pgdsn).
//
// Package postgres is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/pgdsn"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/table"
)

// maxConnectTimeout bounds connecting when the DSN sets no connect_timeout; a smaller
// publish timeout lowers it to half of that, so that an absent server is reported as
// unreachable before the publish times out.
const maxConnectTimeout = 5 * time.Second

var _ router.Driver = (*Driver)(nil)

// Driver inserts into one inbox table through a pool of connections. It is safe for
// concurrent use.
type Driver struct {
	name       string
	log        *slog.Logger
	table      table.Name
	where      string // the table as errors name it: schema.table
	insert     string // the batch statement, rendered once for the table
	absorb     string // the same, skipping message ids already in the inbox
	timeout    time.Duration
	maxPayload int
	chunkBytes int
	pool       *pgxpool.Pool
	buffers    buffers // for encoding the arrays

	duplicates atomic.Uint64
	// ready is set once the inbox took an insert without rows: it exists, the user may
	// insert into it, and message_id has the unique index re-publishes need.
	ready atomic.Bool

	// mu is held for reading by every Publish and for writing by Close, so Close waits
	// for publishes in flight and none starts on a closed pool.
	mu     sync.RWMutex
	closed bool
}

// New builds the driver called name. It does not connect: connections are opened on
// the first Publish, so a database that is down does not stop outboxd from starting. It
// fails only for options it cannot use.
func New(name string, o Options, logger *slog.Logger) (*Driver, error) {
	fail := func(err error) (*Driver, error) { return nil, fmt.Errorf("postgres driver %q: %w", name, err) }
	if o.URL == "" {
		return fail(fmt.Errorf("url: required"))
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	t, err := ParseTable(o.Table)
	if err != nil {
		return fail(fmt.Errorf("table: %w", err))
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = DefaultPublishTimeout
	}
	if o.MaxPayloadBytes <= 0 {
		o.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	pc, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return fail(fmt.Errorf("url %s: %w", pgdsn.Redact(o.URL), pgdsn.RedactParseError(err)))
	}
	pc.MaxConns = int32(min(o.MaxConns, 1<<20))
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = min(maxConnectTimeout, o.PublishTimeout/2)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return fail(fmt.Errorf("url %s: %w", pgdsn.Redact(o.URL), err))
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Driver{
		name:       name,
		log:        logger.With("driver", name),
		table:      t,
		where:      t.String(),
		insert:     insertSQL(t),
		absorb:     absorbSQL(t),
		timeout:    o.PublishTimeout,
		maxPayload: o.MaxPayloadBytes,
		chunkBytes: chunkBytes,
		pool:       pool,
	}, nil
}

// Duplicates is how many messages since New were already in the inbox (the same
// message id) and were therefore not inserted again: re-publishes the primary key
// absorbed.
func (d *Driver) Duplicates() uint64 { return d.duplicates.Load() }

// Close waits for publishes in flight and closes the pool; a second Close does nothing.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.pool.Close()
	return nil
}

// closedErr is every message's error after Close: unreachable, costing no attempt.
func (d *Driver) closedErr() error {
	return router.Unreachable(fmt.Errorf("postgres driver %q: %w", d.name, router.ErrClosed))
}
