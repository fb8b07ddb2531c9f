package store

// Expiry (time to live): a message still pending when its expiry has passed is not
// published but marked expired (docs/contract.md).
//
// Invariants:
//   - A row's expiry is the earlier of its expires_at and created_at + the stream's ttl
//     (either may be absent), judged with the database clock.
//   - Every claim sweeps its stream first, in a statement of its own right before the
//     claim statement (Claim, ClaimOrdered), so an ordered key's expired head is marked
//     expired, and stops holding its key, before the claim walks the key.
//   - No claim takes a pending row whose expiry has passed: the claim statements carry
//     the same predicate as the sweep (liveSQL), so a row that expires between the sweep
//     and the claim is left pending, not published, and swept by the next claim.
//   - Only pending rows expire. A leased row is being published: the claim that took it
//     judged it live, and its outcome is written back as for any other row.
//   - The sweep locks what it expires with FOR UPDATE SKIP LOCKED and re-checks status
//     and expiry on the row's newest version, so it never expires a row a concurrent
//     claim leased, and two sweeps never expire one row twice.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// liveSQL is true for a row that has not expired: the condition every claim adds for
// pending rows. {{ttl}} is the statement's parameter carrying the stream's ttl in ms
// (0: none). Columns are unqualified: each use has one outbox row in scope. The ttl
// comparison is wrapped in IS TRUE (created_at is NOT NULL, so it means the same) only
// to keep it from being an index condition: otherwise the planner may walk the
// undelivered index (stream, created_at) for the claim of a stream with a ttl and sort
// the whole backlog, instead of walking the claim index in its own order.
const liveSQL = `((expires_at IS NULL OR expires_at > now()) AND ({{ttl}}::bigint = 0 OR (created_at > now() - {{ttl}}::bigint * interval '1 millisecond') IS TRUE))`

func renderLive(sql, param string) string {
	return strings.ReplaceAll(sql, "{{live}}", strings.ReplaceAll(liveSQL, "{{ttl}}", param))
}

// expireSQL expires one chunk of a stream's pending rows whose expiry has passed. The
// candidates come from two index walks, each bounded: rows with their own expires_at
// from the expiry index (stream, expires_at), rows past the stream's ttl from the
// undelivered index (stream, created_at; nullif makes the bound NULL, so the walk finds
// nothing, when the stream has no ttl). Neither touches delivered rows. Each candidate
// is then locked and re-checked on its newest version (see the file's invariants),
// looked up by id as an array so that the plan probes the primary key per candidate
// instead of scanning every pending row to join them (which it chose for IN). The
// reason names what ran out and any error an earlier attempt left. Parameters: $1
// stream, $2 ttl in ms (0: none), $3 limit, $4 the ttl as configured, for the reason.
// Returns each expired row as the dead-letter forwarder needs it, with its reason.
const expireSQL = `
WITH due AS (
    (SELECT id FROM {{table}}
     WHERE stream = $1 AND status = 'pending' AND expires_at IS NOT NULL AND expires_at <= now()
     ORDER BY expires_at LIMIT $3)
    UNION
    (SELECT id FROM {{table}}
     WHERE stream = $1 AND status = 'pending'
       AND created_at <= now() - nullif($2::bigint, 0) * interval '1 millisecond'
     ORDER BY created_at LIMIT $3)
), doomed AS (
    SELECT id FROM {{table}}
    WHERE id = ANY (ARRAY(SELECT id FROM due)) AND status = 'pending' AND NOT {{live}}
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS m
SET status = 'expired', deferred_since = NULL,
    last_error = CASE
        WHEN m.expires_at IS NOT NULL
             AND ($2 = 0 OR m.expires_at <= m.created_at + $2 * interval '1 millisecond')
        THEN 'expires_at ' || m.expires_at || ' passed before delivery'
        ELSE 'expired at ' || (m.created_at + $2 * interval '1 millisecond') || ' before delivery (ttl ' || $4 || ')'
    END || CASE WHEN m.attempts > 0
        THEN ' after ' || m.attempts || ' attempt(s); last error: ' || coalesce(m.last_error, 'none')
        ELSE '' END
FROM doomed
WHERE m.id = doomed.id
RETURNING m.id, m.topic, m.key, m.headers, m.payload, coalesce(m.message_id, ''),
          coalesce(m.dedup_id::text, ''), m.attempts, m.last_error`

// expireBatch is how many rows the sweep before a claim expires at most. More waiting
// are expired by the following claims; none is claimed meanwhile.
const expireBatch = 1000

// Expired is one row the sweep expired, with what a dead letter of it carries.
type Expired struct {
	ID        int64
	Topic     string
	Key       []byte // nil when the row has no key
	Headers   map[string]string
	Payload   []byte
	MessageID string // caller-supplied id, "" when none
	DedupID   string // "" for a row older than migration 0004 never claimed
	Attempts  int    // publish attempts spent before it expired
	Reason    string // as stored in last_error
}

// WithTTL gives the messages of stream a time to live counted from created_at
// (streams.<name>.ttl); 0 or less: none. Claims of the stream leave its rows older than
// that pending, and Expire expires them.
func WithTTL(stream string, ttl time.Duration) Option {
	return func(s *Store) {
		if ttl <= 0 {
			delete(s.ttl, stream)
			return
		}
		if s.ttl == nil {
			s.ttl = map[string]time.Duration{}
		}
		s.ttl[stream] = ttl
	}
}

// TTL is the time to live of stream's messages, 0 when it has none.
func (s *Store) TTL(stream string) time.Duration { return s.ttl[stream] }

// ttlMillis is the ttl parameter of the claim and expiry statements: whole
// milliseconds, at least 1 for a ttl shorter than that (0 would mean none).
func (s *Store) ttlMillis(stream string) int64 {
	ttl := s.ttl[stream]
	if ttl <= 0 {
		return 0
	}
	return max(ttl.Milliseconds(), 1)
}

// Expire marks expired up to limit pending rows of stream whose expiry has passed:
// their own expires_at, or created_at + the stream's ttl (WithTTL). It returns the rows
// it expired; fewer than limit means none is left for now.
func (s *Store) Expire(ctx context.Context, stream string, limit int) ([]Expired, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("expire %s: limit must be positive, got %d", stream, limit)
	}
	rows, err := s.pool.Query(ctx, s.sql.expire, stream, s.ttlMillis(stream), limit, shortDuration(s.ttl[stream]))
	if err != nil {
		return nil, fmt.Errorf("expire %s: %w", stream, err)
	}
	defer rows.Close()
	var out []Expired
	for rows.Next() {
		var e Expired
		if err := rows.Scan(&e.ID, &e.Topic, &e.Key, &e.Headers, &e.Payload, &e.MessageID,
			&e.DedupID, &e.Attempts, &e.Reason); err != nil {
			return nil, fmt.Errorf("expire %s: read row: %w", stream, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("expire %s: %w", stream, err)
	}
	return out, nil
}

// shortDuration writes d as a configuration would: 5m, not 5m0s.
func shortDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// purgeExpiredSQL deletes one chunk of expired rows created more than retention ago:
// expiry is judged from created_at onwards, so their age counts from there, as the
// partitioned layout's drop of a whole partition (by created_at) counts it. It walks the
// expired index (only expired rows); SKIP LOCKED as purgeSQL. Parameters: $1 retention
// ms, $2 limit.
const purgeExpiredSQL = `
WITH doomed AS (
    SELECT id FROM {{table}}
    WHERE status = 'expired' AND created_at < now() - $1 * interval '1 millisecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{table}} AS m
USING doomed
WHERE m.id = doomed.id`
