// Package producer writes outbox messages from an application, inside the
// application's own transaction.
//
// Invariant: the client never opens, commits or rolls back a transaction; it only writes
// inside the caller's. A message therefore exists exactly when the caller's business change
// commits, and a rolled-back transaction leaves nothing to publish. Messages are checked
// before any statement is sent, so a refused message leaves the caller's transaction usable.
//
// The writing role needs USAGE on the schema, INSERT on the table and, for the single
// writes that return the new id, SELECT on its id column. Nothing else: no sequence privilege.
//
// Compatibility: this package is public API for applications. With table, router's
// driver interface and router/routertest it is all the module promises; every other
// package is internal to outboxd. It follows the semantic versioning of the module
// github.com/outboxd/outboxd: within a major version, its exported identifiers, their
// documented behaviour and the rows they write (the columns and what their values mean)
// do not change incompatibly, and additions come in minor releases. While the module is
// at v0 an incompatible change may still come, but only in a minor release and listed
// under "Changed" in CHANGELOG.md.
package producer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/table"
)

// Message is one outbox row as a producer writes it. The dispatcher owns every other column.
type Message struct {
	// Stream selects the dispatcher pipeline. Required.
	Stream string
	// Topic is the Kafka topic or NATS subject; the dispatcher adds the stream's prefix.
	// Required.
	Topic string
	// Key is the Kafka partition key and the ordering key; "" stores NULL.
	Key string
	// Headers become broker message headers; names must not be empty. nil stores {}.
	Headers map[string]string
	// Payload is the message body. nil is refused, so that a forgotten payload is not
	// published as an empty one; a non-nil empty slice is a valid empty payload.
	Payload []byte
	// AvailableAt delays delivery until that instant. The zero time means at once, by the
	// database's clock: the client's clock is never used for that default.
	AvailableAt time.Time
	// MessageID is a caller-supplied id the broker and consumers deduplicate on instead of
	// the outbox id; "" stores NULL.
	MessageID string
	// ExpiresAt is the instant after which the message must not be published: if it is
	// still undelivered then (database clock, judged when outboxd claims it), it becomes
	// expired instead (docs/contract.md). The zero time means no expiry of its own; the
	// stream's ttl, if configured, still applies. It must be after AvailableAt when both
	// are set. Setting it needs schema version 6.
	ExpiresAt time.Time
}

// Writer writes messages to one outbox table. Its statements are built once by New; it
// holds no connection and is safe for concurrent use.
type Writer struct {
	table table.Name

	insertOne    string // one row, RETURNING id; pgx and database/sql alike
	insertUnnest string // a pgx batch as arrays, one statement
	// The same, naming expires_at, for messages that set ExpiresAt.
	insertOneExpiring, insertUnnestExpiring string
	// valuesExpiring is insertValues naming expires_at, built on first use.
	valuesExpiring func() (string, []int)
	copyTable      pgx.Identifier // COPY target for a pgx batch without AvailableAt
	insertValues   string         // database/sql: maxSQLRows rows of VALUES
	valuesEnd      []int          // valuesEnd[n] is the length of insertValues holding n rows
	lockKey        string         // the table's key lock function, called with stream and key
}

// New returns a Writer for the outbox table n. The name is validated here, so nothing
// that reaches SQL text can change a statement's meaning.
func New(n table.Name) (*Writer, error) {
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("producer: outbox table: %w", err)
	}
	w := &Writer{table: n, copyTable: pgx.Identifier{n.Schema, n.Table}}
	q := n.Qualified()
	w.insertOne = insertOneSQL(q, false)
	w.insertUnnest = insertUnnestSQL(q, false)
	w.insertOneExpiring = insertOneSQL(q, true)
	w.insertUnnestExpiring = insertUnnestSQL(q, true)
	w.insertValues, w.valuesEnd = insertValuesSQL(q, false)
	w.valuesExpiring = sync.OnceValues(func() (string, []int) { return insertValuesSQL(q, true) })
	w.lockKey = lockKeySQL(n.Derived("lock_key"))
	return w, nil
}

// ready refuses a Writer that did not come from New, instead of sending an empty statement.
func (w *Writer) ready() error {
	if w == nil || w.insertOne == "" {
		return errors.New("producer: Writer must be created with New")
	}
	return nil
}

// defaultWriter is built on first use: a Writer's database/sql batch text is about a
// megabyte, which a program that never uses the shorthands should not pay for.
var defaultWriter = sync.OnceValue(func() *Writer {
	w, err := New(table.Default)
	if err != nil {
		panic(err) // table.Default is a constant that always validates
	}
	return w
})

// Enqueue writes msg to outbox.messages inside tx and returns its id.
func Enqueue(ctx context.Context, tx pgx.Tx, msg Message) (int64, error) {
	return defaultWriter().Enqueue(ctx, tx, msg)
}

// EnqueueBatch writes msgs to outbox.messages inside tx, in one statement.
func EnqueueBatch(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	return defaultWriter().EnqueueBatch(ctx, tx, msgs)
}

// EnqueueSQL writes msg to outbox.messages inside tx and returns its id.
func EnqueueSQL(ctx context.Context, tx *sql.Tx, msg Message) (int64, error) {
	return defaultWriter().EnqueueSQL(ctx, tx, msg)
}

// EnqueueBatchSQL writes msgs to outbox.messages inside tx, one statement per chunk.
func EnqueueBatchSQL(ctx context.Context, tx *sql.Tx, msgs []Message) error {
	return defaultWriter().EnqueueBatchSQL(ctx, tx, msgs)
}
