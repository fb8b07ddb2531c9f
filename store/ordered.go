package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Ordered streams deliver the rows that share a key in id order (docs/ordering.md).
//
// Invariant: a claim of an ordered stream takes a keyed row only together with every
// row of its key that precedes it and still holds the key (pending, leased, or failed
// and not skipped), so no claim ever holds a row whose predecessor is held elsewhere,
// waits out a retry or failed for good. A key's head is its first such row; it is
// claimed only while pending and due, and the claim takes the pending, due rows right
// behind it (the run) under the same lease. While the run is leased, the key's head is
// leased and no other claim takes anything of the key.
//
// Concurrency: the head is locked FOR UPDATE SKIP LOCKED and re-checked (pending and
// due) on its newest version, so two claimers never both take a key: the one that
// comes second skips the locked row or finds it leased. The run behind a locked head
// needs no lock of its own: only the holder of a key's head may lease the key's other
// rows, and rows leave "holds the key" (delivered, skipped, expired) but never return to it,
// except by an operator's requeue. A producer transaction that commits a smaller id
// after a larger one of the same key is the one case order cannot cover (it is not
// visible when its successor is claimed); docs/ordering.md says how producers avoid it.

// KeyCursor is where an ordered stream's next claim resumes its walk over keys, so that
// successive claims visit keys round-robin instead of always the first ones. Keys are
// walked in the order of their hash (messages_key_order_idx). The zero value starts at
// the first key. It belongs to one claimer; it is not safe for concurrent use.
type KeyCursor struct {
	after   int64 // hash of the last key group a full claim took
	started bool
}

// orderedClaimSQL walks an ordered stream's key groups (keys by their 64-bit hash, see
// messages_key_order_idx) from the cursor, one index probe per group: a recursive skip
// scan whose every step takes the first row of the next group, which is that group's
// head. It stops as soon as it has $2 due heads, so its cost follows the keys visited,
// not the rows behind blocked heads. It locks the heads it found, takes the run behind
// each (pending and due, in id order, stopping at the first row that is not), and leases
// up to $2 rows position-major: every head first, then each group's second row, and so
// on, so the claim spreads over keys. Rows without a key are not ordered: up to the rest
// of $2 of them are claimed in id order after the keyed rows. {{from}} is ">= $6" for the
// first walk ($6 the least bigint) and "> $6" to resume after a group.
//
// Expiry ({{live}}, expiry.go): a pending row past its expiry is not due, so it is never
// claimed, as a head or in a run (a run stops before it). It still holds its key until
// the expiry sweep, which the pipeline runs right before each claim, marks it expired;
// from then on the walk passes over it like a delivered row. Holding the key until then
// is what keeps order when two claims judge one head across its expiry instant: one
// that saw it live may be leasing it (and its run) while the other sees it expired,
// and the second must not take the row behind it. The heads' re-check after locking
// leaves expiry out: the walk judged it with this statement's now(), on columns no
// claim or write-back changes, and repeating it there makes the planner misjudge the
// heads' join (measured: 500 ms instead of 5 on a fresh table of 6,000 rows).
// Parameters: $1 stream, $2 limit, $3 token, $4 owner, $5 lease TTL in ms, $6 cursor
// hash, $7 the stream's ttl in ms (0: none).
const orderedClaimSQL = `
WITH RECURSIVE walk(kh, id, due) AS (
    (SELECT hashtextextended(key, 0), id, status = 'pending' AND available_at <= now() AND {{live}}
     FROM {{table}}
     WHERE stream = $1 AND hashtextextended(key, 0) {{from}}
       AND (status IN ('pending', 'leased') OR (status = 'failed' AND skipped_at IS NULL))
     ORDER BY hashtextextended(key, 0), id LIMIT 1)
    UNION ALL
    SELECT nx.kh, nx.id, nx.due
    FROM walk w CROSS JOIN LATERAL (
        SELECT hashtextextended(key, 0) AS kh, id, status = 'pending' AND available_at <= now() AND {{live}} AS due
        FROM {{table}}
        WHERE stream = $1 AND hashtextextended(key, 0) > w.kh
          AND (status IN ('pending', 'leased') OR (status = 'failed' AND skipped_at IS NULL))
        ORDER BY hashtextextended(key, 0), id LIMIT 1) nx
), heads AS (
    SELECT m.id, hashtextextended(m.key, 0) AS kh FROM {{table}} m
    WHERE m.id IN (SELECT id FROM walk WHERE due LIMIT $2)
      AND m.status = 'pending' AND m.available_at <= now()
    FOR UPDATE SKIP LOCKED
), per_key AS (
    -- Rows a group may add behind its head: the rest of the batch shared out evenly.
    SELECT ($2 - count(*) + greatest(count(*), 1) - 1) / greatest(count(*), 1) AS n FROM heads
), runs AS (
    SELECT h.id, h.kh, 0::bigint AS pos FROM heads h
    UNION ALL
    SELECT s.id, h.kh, s.pos FROM heads h
    CROSS JOIN LATERAL (
        SELECT x.id, row_number() OVER (ORDER BY x.id) AS pos,
               bool_and(x.due) OVER (ORDER BY x.id) AS unbroken
        FROM (SELECT id, status = 'pending' AND available_at <= now() AND {{live}} AS due
              FROM {{table}}
              WHERE stream = $1 AND hashtextextended(key, 0) = h.kh AND id > h.id
                AND (status IN ('pending', 'leased') OR (status = 'failed' AND skipped_at IS NULL))
              ORDER BY id LIMIT (SELECT n FROM per_key)) x
    ) s
    WHERE s.unbroken
), keyless AS (
    SELECT id FROM {{table}}
    WHERE stream = $1 AND hashtextextended(key, 0) IS NULL AND status = 'pending' AND available_at <= now()
      AND {{live}}
    ORDER BY id
    LIMIT greatest($2 - (SELECT count(*) FROM runs), 0)
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT id FROM runs ORDER BY pos, kh LIMIT $2)
    UNION ALL
    SELECT id FROM keyless
)
UPDATE {{table}} AS m
SET status = 'leased', lease_token = $3, owner = $4,
    lease_until = now() + $5 * interval '1 millisecond',
    dedup_id = coalesce(m.dedup_id, gen_random_uuid()) -- as claimSQL: drawn once
FROM picked
WHERE m.id = picked.id AND m.status = 'pending'
RETURNING m.id, m.topic, m.key, m.headers, m.payload, coalesce(m.message_id, ''),
          m.dedup_id::text, m.attempts, m.created_at, m.deferred_since, m.lease_until,
          (SELECT count(*) FROM heads), (SELECT max(kh) FROM heads)`

func renderOrderedClaim(from string, sql string) string {
	return strings.ReplaceAll(sql, "{{from}}", from)
}

// ClaimOrdered leases up to limit rows of an ordered stream to owner for ttl: the heads
// of keys that are due, each with the due run behind it, and rows without a key. It
// first expires the stream's rows past their expiry, so an expired head no longer holds
// its key (expiry.go). The
// claim's messages are in id order, so each key's rows are in the order they must
// reach the broker. The walk resumes after cur's key and wraps around once when it
// reaches the last key; cur is advanced. An empty claim is not an error.
func (s *Store) ClaimOrdered(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, cur *KeyCursor) (Claim, error) {
	if limit <= 0 {
		return Claim{}, fmt.Errorf("claim %s: limit must be positive, got %d", stream, limit)
	}
	if ttl < time.Millisecond {
		return Claim{}, fmt.Errorf("claim %s: lease TTL must be at least 1ms, got %s", stream, ttl)
	}
	c := Claim{Token: NewToken(), Messages: make([]Message, 0, limit)}
	expired, err := s.Expire(ctx, stream, expireBatch)
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", stream, err)
	}
	c.Expired = expired
	for pass := 0; pass < 2 && len(c.Messages) < limit; pass++ {
		resumed := cur.started
		sql, after := s.sql.claimOrderedFirst, int64(math.MinInt64)
		if resumed {
			sql, after = s.sql.claimOrderedAfter, cur.after
		}
		want := limit - len(c.Messages)
		heads, last, err := s.claimOrdered(ctx, sql, stream, want, owner, ttl, after, &c)
		if err != nil {
			return Claim{Token: c.Token, Expired: expired}, err // see Claim: rows may be leased under it
		}
		// A walk that found a full set of heads stopped early: the next one resumes
		// after the last of them. Otherwise it reached the last key, and the next walk
		// starts again from the first.
		if heads >= want {
			cur.after, cur.started = last, true
		} else {
			cur.after, cur.started = 0, false
		}
		if !resumed || heads >= want {
			break // the walk covered every key from the first, or filled the claim
		}
	}
	slices.SortFunc(c.Messages, func(a, b Message) int { return cmp.Compare(a.ID, b.ID) })
	return c, nil
}

// claimOrdered runs one ordered claim statement and appends its rows to c. It returns
// how many heads the walk locked and the greatest of their key hashes.
func (s *Store) claimOrdered(ctx context.Context, sql, stream string, limit int, owner string, ttl time.Duration, after int64, c *Claim) (int, int64, error) {
	rows, err := s.pool.Query(ctx, sql, stream, limit, c.Token, owner, ttl.Milliseconds(), after, s.ttlMillis(stream))
	if err != nil {
		return 0, 0, fmt.Errorf("claim %s: %w", stream, err)
	}
	defer rows.Close()
	var heads int
	var last *int64
	var deferred *time.Time
	var created pgtype.Timestamptz
	var until time.Time
	for rows.Next() {
		var m Message
		if err := rows.Scan(&m.ID, &m.Topic, &m.Key, &m.Headers, &m.Payload, &m.MessageID,
			&m.DedupID, &m.Attempts, &created, &deferred, &until, &heads, &last); err != nil {
			return 0, 0, fmt.Errorf("claim %s: read row: %w", stream, err)
		}
		m.Stream, m.CreatedAt = stream, finiteTime(created)
		if deferred != nil {
			m.DeferredSince = *deferred
		}
		if c.LeaseUntil.IsZero() || until.Before(c.LeaseUntil) {
			c.LeaseUntil = until
		}
		c.Messages = append(c.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("claim %s: %w", stream, err)
	}
	if last == nil {
		return heads, 0, nil
	}
	return heads, *last, nil
}

// BlockedStream is the state of one ordered stream's keys that a failed head holds up.
type BlockedStream struct {
	Stream string
	// Keys whose head failed for good and was not skipped: nothing more of them is
	// delivered until an operator skips or requeues the head.
	Keys int64
	// Waiting counts the pending and leased rows behind those heads.
	Waiting int64
}

// blockedSQL counts, per stream, the keys held by a failed head and the rows waiting
// behind them. Both come from the key order index (a failed head that is not skipped
// is in it, and so is every row that waits behind it), so the cost follows the blocked
// keys and their waiting rows, never delivered rows. A plain read; no locks.
// Parameters: $1 streams.
const blockedSQL = `
SELECT s.stream, count(b.key), coalesce(sum(b.waiting), 0)::bigint
FROM unnest($1::text[]) AS s(stream)
LEFT JOIN LATERAL (
    SELECT f.key,
           (SELECT count(*) FROM {{table}} w
            WHERE w.stream = s.stream AND hashtextextended(w.key, 0) = hashtextextended(f.key, 0)
              AND w.key = f.key AND w.id > f.head
              AND (w.status IN ('pending', 'leased') OR (w.status = 'failed' AND w.skipped_at IS NULL))
              AND w.status <> 'failed') AS waiting
    FROM (SELECT key, min(id) AS head FROM {{table}}
          WHERE stream = s.stream AND key IS NOT NULL AND status = 'failed' AND skipped_at IS NULL
          GROUP BY key) f
) b ON true
GROUP BY s.stream
ORDER BY s.stream`

// Blocked reports, for each of the named (ordered) streams, the keys a failed head holds
// up and the rows waiting behind them.
func (s *Store) Blocked(ctx context.Context, streams []string) ([]BlockedStream, error) {
	rows, err := s.pool.Query(ctx, render(blockedSQL, s.table), streams)
	if err != nil {
		return nil, fmt.Errorf("count blocked keys in %s: %w", s.table, err)
	}
	defer rows.Close()
	out := make([]BlockedStream, 0, len(streams))
	for rows.Next() {
		var b BlockedStream
		if err := rows.Scan(&b.Stream, &b.Keys, &b.Waiting); err != nil {
			return nil, fmt.Errorf("count blocked keys in %s: %w", s.table, err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count blocked keys in %s: %w", s.table, err)
	}
	return out, nil
}

// skipIDsSQL skips the failed (or pending) rows among ids through the table's skip
// function, which re-checks each row's status under its row lock: a row leased by a
// pipeline, delivered, or already skipped is left alone and not counted.
// Parameters: $1 ids.
const skipIDsSQL = `SELECT {{skip}}($1::bigint[])`

// skipHeadSQL skips the head of one key: its first row that holds the key, when that
// row failed (for good, or at least once and now waits out a retry). A head never tried
// is left alone, so that skipping a key twice does not skip a healthy message, and so is
// a leased one (it is being published). Returns the id skipped, or none.
// Parameters: $1 stream, $2 key.
const skipHeadSQL = `
WITH head AS (
    SELECT id, status, attempts FROM {{table}}
    WHERE stream = $1 AND hashtextextended(key, 0) = hashtextextended($2, 0) AND key = $2
      AND (status IN ('pending', 'leased') OR (status = 'failed' AND skipped_at IS NULL))
    ORDER BY id LIMIT 1
)
SELECT id FROM head WHERE (status = 'failed' OR attempts > 0) AND {{skip}}(ARRAY[id]) = 1`

func (s *Store) renderSkip(sql string) string {
	return strings.ReplaceAll(render(sql, s.table), "{{skip}}", s.table.Derived("skip"))
}

// Skip ends the failed rows among ids for good and lets their keys continue: each stays
// failed (last_error kept) with skipped_at set. A pending row is failed and skipped at
// once; leased, delivered and already skipped rows are left alone. It returns how many
// rows it skipped. The pipelines of the streams concerned are woken.
func (s *Store) Skip(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) > MaxRequeueBatch {
		return 0, fmt.Errorf("skip %d ids in %s: at most %d ids per call", len(ids), s.table, MaxRequeueBatch)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, s.renderSkip(skipIDsSQL), ids).Scan(&n); err != nil {
		return 0, fmt.Errorf("skip %d ids in %s: %w", len(ids), s.table, err)
	}
	return n, nil
}

// SkipHead skips the head of key in stream when it failed (for good, or at least once and
// now waits out a retry) and returns its id; ok is false when the key has no such head
// (nothing holds it, its head is being published right now, or was never tried).
func (s *Store) SkipHead(ctx context.Context, stream, key string) (id int64, ok bool, err error) {
	err = s.pool.QueryRow(ctx, s.renderSkip(skipHeadSQL), stream, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("skip the head of key %q of stream %s in %s: %w", key, stream, s.table, err)
	}
	return id, true, nil
}
