package store

// One message opened by an operator (the web console's message page).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MessageDetail is one row as an operator opens it: the summary's columns, the headers
// and the payload's first bytes (Payload holds at most the limit asked for; the
// summary's PayloadBytes is its whole size).
type MessageDetail struct {
	MessageSummary
	Headers map[string]string
	Payload []byte
}

// getMessageSQL reads one row by id: a primary-key probe (one per partition in the
// partitioned layout, whose key is (id, created_at)). Only the payload's first $2
// bytes leave the server; octet_length reads the whole size from the value's header.
// Concurrency: a plain read, no locks. Parameters: $1 id, $2 payload bytes to read.
const getMessageSQL = `
SELECT id, stream, topic, coalesce(key, ''), status, attempts, coalesce(last_error, ''),
       created_at, available_at, published_at, deferred_since, coalesce(owner, ''),
       lease_until, coalesce(message_id, ''), octet_length(payload),
       headers, substring(payload FROM 1 FOR $2::int)
FROM {{table}}
WHERE id = $1`

// GetMessage reads the row with id, its payload cut at maxPayload bytes. ok is false
// when no row has that id (never written, or purged by retention).
func (s *Store) GetMessage(ctx context.Context, id int64, maxPayload int) (m MessageDetail, ok bool, err error) {
	if maxPayload < 0 {
		return MessageDetail{}, false, fmt.Errorf("get message %d in %s: negative payload limit %d", id, s.table, maxPayload)
	}
	var published, deferred, leaseUntil *time.Time
	var created, available pgtype.Timestamptz
	err = s.pool.QueryRow(ctx, s.inspectSQL(getMessageSQL), id, maxPayload).Scan(
		&m.ID, &m.Stream, &m.Topic, &m.Key, &m.Status, &m.Attempts, &m.LastError,
		&created, &available, &published, &deferred, &m.Owner, &leaseUntil, &m.MessageID, &m.PayloadBytes,
		&m.Headers, &m.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return MessageDetail{}, false, nil
	}
	if err != nil {
		return MessageDetail{}, false, fmt.Errorf("get message %d in %s: %w", id, s.table, err)
	}
	m.CreatedAt, m.AvailableAt = finiteTime(created), finiteTime(available)
	m.PublishedAt, m.DeferredSince, m.LeaseUntil = deref(published), deref(deferred), deref(leaseUntil)
	return m, true, nil
}
