package store

// The filtered message listing of the web console: filters no index of the table
// covers (key, topic, error text) applied to a bounded walk of one that does.
//
// Invariant: a scan examines at most ScanFilter.Scan rows of an indexed range (the
// primary key from the cursor, or a backlog status's partial index), whatever the
// filters match, and says how far it got, so a rare match costs a bounded page and an
// honest "more may match" instead of a walk over the whole table. An index on key,
// topic or last_error would serve these filters exactly, but every producer's insert
// would pay for it, for the sake of a page an operator opens now and then.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MaxScan bounds the rows one scan may examine.
const MaxScan = 100000

// ScanFilter is a MessageFilter with the filters no index covers. Zero fields do not
// filter.
type ScanFilter struct {
	MessageFilter
	// Key and Topic match exactly; ErrorContains is a case-insensitive substring of
	// last_error.
	Key, Topic, ErrorContains string
	// Scan is how many rows of the indexed range to examine at most, 1 to MaxScan.
	Scan int
}

// ScanPage is one page of a scan: the matching rows (at most Limit), how many rows of
// the range it examined, and the highest id it examined (0: none). When Scanned is
// the filter's Scan and fewer than Limit rows matched, more may match after
// LastScanned.
type ScanPage struct {
	Rows        []MessageSummary
	Scanned     int64
	LastScanned int64
}

func (f ScanFilter) check() error {
	if err := f.MessageFilter.check(); err != nil {
		return err
	}
	if f.Scan < 1 || f.Scan > MaxScan {
		return fmt.Errorf("scan must be between 1 and %d rows, got %d", MaxScan, f.Scan)
	}
	return nil
}

// backlogStatus says whether rows of status have a partial index of their own, led
// by stream (claim or undelivered, lease, failed, expired), and are few beside the
// delivered rows.
func backlogStatus(status string) bool {
	return status == "pending" || status == "leased" || status == "failed" || status == "expired"
}

// scanResidual is the part of a scan shared by both ranges: of the scanned rows, the
// ids of those matching every filter no index covers, at most $11, and the scan's
// extent. Parameters: $5 stream, $6 since, $7 until, $8 key, $9 topic, $10 error text
// (NULL: no filter), $11 limit.
const scanResidual = `
SELECT (SELECT count(*) FROM scanned), (SELECT coalesce(max(id), 0) FROM scanned),
       array(SELECT id FROM scanned
             WHERE ($5::text IS NULL OR stream = $5::text)
               AND ($6::timestamptz IS NULL OR created_at >= $6::timestamptz)
               AND ($7::timestamptz IS NULL OR created_at < $7::timestamptz)
               AND ($8::text IS NULL OR key = $8::text)
               AND ($9::text IS NULL OR topic = $9::text)
               AND ($10::text IS NULL OR strpos(lower(last_error), lower($10::text)) > 0)
             ORDER BY id LIMIT $11)`

// scanSQL walks the primary key from the cursor, $4 rows at most (of status $3, when
// given: delivered, whose rows are dense), and keeps those matching the other filters.
// Concurrency: a plain read, no locks, one snapshot; the id keyset keeps pages
// disjoint. Parameters: $1 after id, $2 highest id, $3 status, $4 rows to scan, then
// as scanResidual.
const scanSQL = `
WITH scanned AS MATERIALIZED (
    SELECT id, stream, created_at, key, topic, last_error FROM {{table}}
    WHERE id > $1 AND ($2::bigint IS NULL OR id <= $2::bigint)
      AND ($3::text IS NULL OR status = $3::text)
    ORDER BY id
    LIMIT $4
)` + scanResidual

// scanBacklogSQL is scanSQL for a backlog status: the range is the status's partial
// index (with the stream, when given), collected behind a MATERIALIZED fence as
// listBacklogSQL does, so that the walk never passes over delivered rows; its first $4
// ids are then read by primary key. Concurrency and parameters as scanSQL; $3 is never
// NULL here.
const scanBacklogSQL = `
WITH range AS MATERIALIZED (
    SELECT id FROM {{table}}
    WHERE status = $3::text AND id > $1 AND ($2::bigint IS NULL OR id <= $2::bigint)
      AND ($5::text IS NULL OR stream = $5::text)
), scanned AS MATERIALIZED (
    SELECT id, stream, created_at, key, topic, last_error FROM {{table}}
    WHERE id IN (SELECT id FROM range ORDER BY id LIMIT $4)
)` + scanResidual

// rowsByIDSQL reads the listing's columns of the given rows, by primary key (one probe
// per partition in the partitioned layout). A row gone since the scan (purged) is
// simply missing. A plain read; no locks. Parameters: $1 ids.
const rowsByIDSQL = `
SELECT id, stream, topic, coalesce(key, ''), status, attempts, coalesce(last_error, ''),
       created_at, available_at, published_at, deferred_since, coalesce(owner, ''),
       lease_until, coalesce(message_id, ''), octet_length(payload)
FROM {{table}}
WHERE id = ANY ($1::bigint[])
ORDER BY id`

// scanStatement returns the statement ScanMessages runs for f, and its arguments.
func (s *Store) scanStatement(f ScanFilter) (string, []any) {
	sql := scanSQL
	if backlogStatus(f.Status) {
		sql = scanBacklogSQL
	}
	return s.inspectSQL(sql), []any{pgx.QueryExecModeExec, f.AfterID, nullable(f.ToID), nullable(f.Status), f.Scan,
		nullable(f.Stream), nullableTime(f.Since), nullableTime(f.Until), nullable(f.Key), nullable(f.Topic),
		nullable(f.ErrorContains), f.Limit}
}

// ScanMessages examines at most f.Scan rows of the indexed range after f.AfterID and
// returns those matching every filter, at most f.Limit, in id order.
func (s *Store) ScanMessages(ctx context.Context, f ScanFilter) (ScanPage, error) {
	if err := f.check(); err != nil {
		return ScanPage{}, fmt.Errorf("scan messages in %s: %w", s.table, err)
	}
	var p ScanPage
	var ids []int64
	sql, args := s.scanStatement(f)
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&p.Scanned, &p.LastScanned, &ids); err != nil {
		return ScanPage{}, fmt.Errorf("scan messages in %s: %w", s.table, err)
	}
	if len(ids) == 0 {
		return p, nil
	}
	rows, err := s.pool.Query(ctx, s.inspectSQL(rowsByIDSQL), ids)
	if err != nil {
		return ScanPage{}, fmt.Errorf("scan messages in %s: %w", s.table, err)
	}
	defer rows.Close()
	p.Rows = make([]MessageSummary, 0, len(ids))
	for rows.Next() {
		var m MessageSummary
		var published, deferred, leaseUntil *time.Time
		var created, available pgtype.Timestamptz
		if err := rows.Scan(&m.ID, &m.Stream, &m.Topic, &m.Key, &m.Status, &m.Attempts, &m.LastError,
			&created, &available, &published, &deferred, &m.Owner,
			&leaseUntil, &m.MessageID, &m.PayloadBytes); err != nil {
			return ScanPage{}, fmt.Errorf("scan messages in %s: %w", s.table, err)
		}
		m.CreatedAt, m.AvailableAt = finiteTime(created), finiteTime(available)
		m.PublishedAt, m.DeferredSince, m.LeaseUntil = deref(published), deref(deferred), deref(leaseUntil)
		p.Rows = append(p.Rows, m)
	}
	if err := rows.Err(); err != nil {
		return ScanPage{}, fmt.Errorf("scan messages in %s: %w", s.table, err)
	}
	return p, nil
}
