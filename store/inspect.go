package store

// Inspection and requeue, for operators (the admin API and `outboxd messages`,
// `outboxd requeue`, `outboxd stats`).
//
// Invariants:
//   - Reading never locks: a listing is a plain MVCC read, and a page is keyed by id
//     (id > cursor ORDER BY id), so paging never lists a row twice even while rows
//     change status between pages.
//   - Only failed rows are ever requeued, and always through the table's own
//     <table>_requeue(ids) function, which resets every dispatcher column and wakes
//     the streams' pipelines. A requeue is bounded (MaxRequeueBatch per call); bulk
//     requeues are done in chunks by the caller.
//   - Filters are optional, so their statements are written with "($n IS NULL OR …)"
//     and are run with pgx.QueryExecModeExec: the unnamed statement is planned with the
//     values bound, the unset filters fold away, and the planner can prove a partial
//     index's predicate (status = 'failed', status = 'pending') from the bound status.
//     A cached generic plan could do neither.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/table"
)

// Statuses is the table's status domain (constraint <table>_status_domain).
var Statuses = []string{"pending", "leased", "delivered", "failed", "expired"}

// MaxListLimit bounds one ListMessages page.
const MaxListLimit = 10000

// MaxRequeueBatch bounds the rows one requeue call may change.
const MaxRequeueBatch = 10000

// MessageFilter selects rows to list. Zero fields do not filter.
type MessageFilter struct {
	Stream string
	Status string    // one of Statuses
	Since  time.Time // created_at >= Since
	Until  time.Time // created_at < Until
	// AfterID is the keyset cursor: only rows with a greater id are listed.
	AfterID int64
	// ToID bounds the ids from above: id <= ToID; zero: no bound.
	ToID int64
	// Limit is the page size, 1 to MaxListLimit.
	Limit int
}

// MessageSummary is one row as operators inspect it: every column except the payload
// and headers, and the payload's size. A NULL text column reads as "", a NULL or
// infinite timestamp as the zero time.
type MessageSummary struct {
	ID            int64
	Stream        string
	Topic         string
	Key           string
	Status        string
	Attempts      int
	LastError     string
	CreatedAt     time.Time
	AvailableAt   time.Time
	PublishedAt   time.Time
	DeferredSince time.Time
	Owner         string
	LeaseUntil    time.Time
	MessageID     string
	PayloadBytes  int64
}

// RequeueFilter selects failed rows to requeue, oldest id first. Stream is required.
type RequeueFilter struct {
	Stream string
	Since  time.Time // created_at >= Since; zero: no bound
	Until  time.Time // created_at < Until; zero: no bound
	// AfterID skips rows with an id up to and including it: a bulk requeue passes the
	// previous chunk's LastID so that a row which fails again while the bulk runs is
	// not requeued a second time.
	AfterID int64
	// Limit is how many rows to requeue at most, 1 to MaxRequeueBatch.
	Limit int
	// ToID bounds the ids from above (id <= ToID); Key and Topic match exactly;
	// ErrorContains is a case-insensitive substring of last_error. Zero: no filter.
	// The failed index (stream, id) bounds the walk; these only drop rows from it.
	ToID                      int64
	Key, Topic, ErrorContains string
}

// RequeueResult reports one bounded requeue.
type RequeueResult struct {
	Requeued int64
	// LastID is the highest id the chunk selected (requeued, or left alone because it
	// was no longer failed when the update reached it); 0 when nothing matched.
	LastID int64
}

// CheckStatus reports why status is not a row status, or nil.
func CheckStatus(status string) error {
	if !slices.Contains(Statuses, status) {
		return fmt.Errorf("%q is not one of %s", status, strings.Join(Statuses, ", "))
	}
	return nil
}

func (f MessageFilter) check() error {
	switch {
	case f.Status != "" && CheckStatus(f.Status) != nil:
		return fmt.Errorf("status %w", CheckStatus(f.Status))
	case f.Limit < 1 || f.Limit > MaxListLimit:
		return fmt.Errorf("limit must be between 1 and %d, got %d", MaxListLimit, f.Limit)
	case f.AfterID < 0:
		return fmt.Errorf("cursor id must not be negative, got %d", f.AfterID)
	case f.ToID < 0:
		return fmt.Errorf("highest id must not be negative, got %d", f.ToID)
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return fmt.Errorf("until (%s) must be after since (%s)", f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	return nil
}

func (f RequeueFilter) check() error {
	switch {
	case f.Stream == "":
		return fmt.Errorf("a stream is required")
	case f.Limit < 1 || f.Limit > MaxRequeueBatch:
		return fmt.Errorf("limit must be between 1 and %d, got %d", MaxRequeueBatch, f.Limit)
	case f.AfterID < 0:
		return fmt.Errorf("after id must not be negative, got %d", f.AfterID)
	case f.ToID < 0:
		return fmt.Errorf("highest id must not be negative, got %d", f.ToID)
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return fmt.Errorf("until (%s) must be after since (%s)", f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	return nil
}

// inspectSQL renders an inspection statement for this store's table. The operator
// statements are rendered per call rather than at construction: they run rarely, and
// rendering costs far less than the round trip.
func (s *Store) inspectSQL(sql string) string {
	return renderInspect(sql, s.table)
}

func renderInspect(sql string, n table.Name) string {
	return strings.ReplaceAll(render(sql, n), "{{requeue}}", n.Derived("requeue"))
}

// listSQL lists one page of rows in id order, walking the primary key from the cursor:
// for delivered rows and for no status filter, where matching rows are dense. Its cost
// is the rows skipped on the way, so a filter on time or on a rare stream alone may
// walk much of the table (no index covers them across statuses).
// Concurrency: a plain read, no locks; the page is one snapshot, and the id keyset
// makes successive pages disjoint. The payload is never read: octet_length takes a
// bytea's size from its header without decompressing or fetching it from TOAST.
// Parameters: $1 after id, $2 status, $3 stream, $4 since, $5 until (NULL: no filter),
// $6 limit, $7 highest id (NULL: no bound).
const listSQL = `
SELECT id, stream, topic, coalesce(key, ''), status, attempts, coalesce(last_error, ''),
       created_at, available_at, published_at, deferred_since, coalesce(owner, ''),
       lease_until, coalesce(message_id, ''), octet_length(payload)
FROM {{table}}
WHERE id > $1
  AND ($2::text IS NULL OR status = $2::text)
  AND ($3::text IS NULL OR stream = $3::text)
  AND ($4::timestamptz IS NULL OR created_at >= $4::timestamptz)
  AND ($5::timestamptz IS NULL OR created_at < $5::timestamptz)
  AND ($7::bigint IS NULL OR id <= $7::bigint)
ORDER BY id
LIMIT $6`

// listBacklogSQL is listSQL for the backlog statuses (pending, leased, failed) and for
// expired rows. Their rows are few and usually the newest, so walking the primary key
// would pass over every delivered row first, while the planner, assuming an even
// spread, prefers that walk. The MATERIALIZED fence makes it collect the matching ids
// from the status's partial index (claim or undelivered, lease, failed, expired)
// instead, so the cost follows the backlog, not the delivered rows kept; the page is
// then read by primary key.
// Concurrency and parameters as listSQL; $2 is never NULL here.
const listBacklogSQL = `
WITH matching AS MATERIALIZED (
    SELECT id FROM {{table}}
    WHERE status = $2::text AND id > $1
      AND ($3::text IS NULL OR stream = $3::text)
      AND ($4::timestamptz IS NULL OR created_at >= $4::timestamptz)
      AND ($5::timestamptz IS NULL OR created_at < $5::timestamptz)
      AND ($7::bigint IS NULL OR id <= $7::bigint)
)
SELECT id, stream, topic, coalesce(key, ''), status, attempts, coalesce(last_error, ''),
       created_at, available_at, published_at, deferred_since, coalesce(owner, ''),
       lease_until, coalesce(message_id, ''), octet_length(payload)
FROM {{table}}
WHERE id IN (SELECT id FROM matching ORDER BY id LIMIT $6)
ORDER BY id`

// requeueIDsSQL requeues the failed rows among the given ids. Concurrency: the
// function's UPDATE re-checks status = 'failed' on each row it locks, so a row that a
// concurrent requeue already moved (or any row that is not failed: pending, leased
// under a pipeline's write-back, delivered) is left alone and not counted.
// Parameters: $1 ids.
const requeueIDsSQL = `SELECT {{requeue}}($1::bigint[])`

// requeueFailedSQL requeues one chunk of a stream's failed rows, oldest id first, and
// returns the count and the chunk's highest selected id. Concurrency: the selection
// takes no locks; the requeue function re-checks status = 'failed' under the row lock,
// so a row requeued concurrently by someone else is skipped, not counted twice. The
// selection walks the failed index (stream, id); the filters no index covers (key,
// topic, error text) drop rows from that walk, whose cost is the stream's failed rows
// at most. picked is referenced twice, so it is materialised once and both uses see
// the same ids.
// Parameters: $1 stream, $2 since, $3 until (NULL: no bound), $4 after id, $5 limit,
// $6 highest id, $7 key, $8 topic, $9 error text (NULL: no filter).
const requeueFailedSQL = `
WITH picked AS (
    SELECT id FROM {{table}}
    WHERE status = 'failed' AND stream = $1::text AND id > $4
      AND ($2::timestamptz IS NULL OR created_at >= $2::timestamptz)
      AND ($3::timestamptz IS NULL OR created_at < $3::timestamptz)
      AND ($6::bigint IS NULL OR id <= $6::bigint)
      AND ($7::text IS NULL OR key = $7::text)
      AND ($8::text IS NULL OR topic = $8::text)
      AND ($9::text IS NULL OR strpos(lower(last_error), lower($9::text)) > 0)
    ORDER BY id
    LIMIT $5
)
SELECT {{requeue}}(array(SELECT id FROM picked)), coalesce((SELECT max(id) FROM picked), 0)`

// countFailedSQL counts a stream's failed rows matching a requeue filter, for a bulk
// requeue's progress display and the console's confirmation. A plain read from the
// failed index; no locks.
// Parameters: $1 stream, $2 since, $3 until (NULL: no bound), $4 after id, $5 highest
// id, $6 key, $7 topic, $8 error text (NULL: no filter).
const countFailedSQL = `
SELECT count(*) FROM {{table}}
WHERE status = 'failed' AND stream = $1::text AND id > $4
  AND ($2::timestamptz IS NULL OR created_at >= $2::timestamptz)
  AND ($3::timestamptz IS NULL OR created_at < $3::timestamptz)
  AND ($5::bigint IS NULL OR id <= $5::bigint)
  AND ($6::text IS NULL OR key = $6::text)
  AND ($7::text IS NULL OR topic = $7::text)
  AND ($8::text IS NULL OR strpos(lower(last_error), lower($8::text)) > 0)`

// streamsSQL lists the streams that have pending, leased or failed rows. Each half is a
// skip scan: a recursive CTE takes the next stream greater than the last one from the
// undelivered index (stream, created_at) or the failed index (stream, id), one index
// probe per stream, so the cost follows the number of streams, not of rows. Streams
// whose rows are all delivered are not listed: no partial index covers them, and their
// backlog is zero. A plain read; no locks.
const streamsSQL = `
WITH RECURSIVE undelivered(stream) AS (
    (SELECT stream FROM {{table}} WHERE status IN ('pending', 'leased') ORDER BY stream LIMIT 1)
    UNION ALL
    SELECT (SELECT m.stream FROM {{table}} m
            WHERE m.status IN ('pending', 'leased') AND m.stream > u.stream
            ORDER BY m.stream LIMIT 1)
    FROM undelivered u WHERE u.stream IS NOT NULL
), failed(stream) AS (
    (SELECT stream FROM {{table}} WHERE status = 'failed' ORDER BY stream LIMIT 1)
    UNION ALL
    SELECT (SELECT m.stream FROM {{table}} m
            WHERE m.status = 'failed' AND m.stream > f.stream
            ORDER BY m.stream LIMIT 1)
    FROM failed f WHERE f.stream IS NOT NULL
)
SELECT stream FROM undelivered WHERE stream IS NOT NULL
UNION
SELECT stream FROM failed WHERE stream IS NOT NULL
ORDER BY 1`

// nullable turns the zero value of a filter field into SQL NULL.
func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

func nullableTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// listStatement returns the statement ListMessages runs for f, and its arguments.
func (s *Store) listStatement(f MessageFilter) (string, []any) {
	sql := listSQL
	if backlogStatus(f.Status) {
		sql = listBacklogSQL
	}
	return s.inspectSQL(sql), []any{pgx.QueryExecModeExec,
		f.AfterID, nullable(f.Status), nullable(f.Stream), nullableTime(f.Since), nullableTime(f.Until), f.Limit, nullable(f.ToID)}
}

// ListMessages returns one page of rows matching f, in id order. The next page is the
// one with AfterID set to the last id returned; a page shorter than the limit is the
// last.
func (s *Store) ListMessages(ctx context.Context, f MessageFilter) ([]MessageSummary, error) {
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("list messages in %s: %w", s.table, err)
	}
	sql, args := s.listStatement(f)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages in %s: %w", s.table, err)
	}
	defer rows.Close()
	out := make([]MessageSummary, 0, min(f.Limit, 1000))
	for rows.Next() {
		var m MessageSummary
		var published, deferred, leaseUntil *time.Time
		var created, available pgtype.Timestamptz // a producer may have dated them ±infinity
		if err := rows.Scan(&m.ID, &m.Stream, &m.Topic, &m.Key, &m.Status, &m.Attempts, &m.LastError,
			&created, &available, &published, &deferred, &m.Owner,
			&leaseUntil, &m.MessageID, &m.PayloadBytes); err != nil {
			return nil, fmt.Errorf("list messages in %s: %w", s.table, err)
		}
		m.CreatedAt, m.AvailableAt = finiteTime(created), finiteTime(available)
		m.PublishedAt, m.DeferredSince, m.LeaseUntil = deref(published), deref(deferred), deref(leaseUntil)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list messages in %s: %w", s.table, err)
	}
	return out, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// RequeueIDs puts the failed rows among ids back in line: pending at once, attempts
// reset, error cleared. Ids that are not failed are left alone. It returns how many
// rows it requeued.
func (s *Store) RequeueIDs(ctx context.Context, ids []int64) (int64, error) {
	switch {
	case len(ids) == 0:
		return 0, nil
	case len(ids) > MaxRequeueBatch:
		return 0, fmt.Errorf("requeue %d ids in %s: at most %d ids per call", len(ids), s.table, MaxRequeueBatch)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, s.inspectSQL(requeueIDsSQL), ids).Scan(&n); err != nil {
		return 0, fmt.Errorf("requeue %d ids in %s: %w", len(ids), s.table, err)
	}
	return n, nil
}

// RequeueFailed requeues up to f.Limit failed rows of f.Stream, oldest id first.
func (s *Store) RequeueFailed(ctx context.Context, f RequeueFilter) (RequeueResult, error) {
	if err := f.check(); err != nil {
		return RequeueResult{}, fmt.Errorf("requeue failed messages in %s: %w", s.table, err)
	}
	var r RequeueResult
	sql, args := s.requeueStatement(f)
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&r.Requeued, &r.LastID)
	if err != nil {
		return RequeueResult{}, fmt.Errorf("requeue failed messages of %s in %s: %w", f.Stream, s.table, err)
	}
	return r, nil
}

// requeueStatement returns the statement RequeueFailed runs for f, and its arguments.
func (s *Store) requeueStatement(f RequeueFilter) (string, []any) {
	return s.inspectSQL(requeueFailedSQL), []any{pgx.QueryExecModeExec,
		f.Stream, nullableTime(f.Since), nullableTime(f.Until), f.AfterID, f.Limit,
		nullable(f.ToID), nullable(f.Key), nullable(f.Topic), nullable(f.ErrorContains)}
}

// countStatement returns the statement CountFailed runs for f, and its arguments.
func (s *Store) countStatement(f RequeueFilter) (string, []any) {
	return s.inspectSQL(countFailedSQL), []any{pgx.QueryExecModeExec,
		f.Stream, nullableTime(f.Since), nullableTime(f.Until), f.AfterID,
		nullable(f.ToID), nullable(f.Key), nullable(f.Topic), nullable(f.ErrorContains)}
}

// CountFailed counts the failed rows a requeue filter selects after its AfterID,
// ignoring its Limit.
func (s *Store) CountFailed(ctx context.Context, f RequeueFilter) (int64, error) {
	if f.Stream == "" {
		return 0, fmt.Errorf("count failed messages in %s: a stream is required", s.table)
	}
	var n int64
	sql, args := s.countStatement(f)
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count failed messages of %s in %s: %w", f.Stream, s.table, err)
	}
	return n, nil
}

// Streams lists, in name order, the streams that have pending, leased or failed rows.
// A stream whose rows are all delivered has no backlog and is not listed.
func (s *Store) Streams(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, s.inspectSQL(streamsSQL))
	if err != nil {
		return nil, fmt.Errorf("list streams in %s: %w", s.table, err)
	}
	streams, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list streams in %s: %w", s.table, err)
	}
	return streams, nil
}
