package store

import (
	"strings"

	"github.com/outboxd/outboxd/table"
)

// statements holds every SQL text, rendered once for one table. Identifiers are
// validated and quoted by package table; every value is a parameter.
type statements struct {
	claim, ack, ackAgain, release, retry, deferral, fail string
	claimOrderedFirst, claimOrderedAfter                 string
	schemaVersion                                        string
	reclaim, purge, backlog, backlogSample               string
	expire, purgeExpired                                 string
	due                                                  string

	// Transaction mode (held.go): the claim takes row locks instead of leases, and
	// the write-backs run in the claim's transaction.
	heldClaim, heldAck, heldRetry, heldDefer, heldFail string
}

func newStatements(n table.Name) statements {
	return statements{
		claim:  render(renderLive(claimSQL, "$6"), n),
		expire: render(renderLive(expireSQL, "$2"), n),

		claimOrderedFirst: render(renderLive(renderOrderedClaim(">= $6", orderedClaimSQL), "$7"), n),
		claimOrderedAfter: render(renderLive(renderOrderedClaim("> $6", orderedClaimSQL), "$7"), n),
		ack:               render(ackSQL, n),
		ackAgain:          render(ackAgainSQL, n),
		release:           render(releaseSQL, n),
		retry:             render(retrySQL, n),
		deferral:          render(deferSQL, n),
		fail:              render(failSQL, n),
		reclaim:           render(reclaimSQL, n),
		purge:             strings.ReplaceAll(render(purgeSQL, n), "{{purged}}", n.Derived("purged")),
		purgeExpired:      render(purgeExpiredSQL, n),
		backlog:           render(backlogSQL, n),
		backlogSample:     render(backlogSampleSQL, n),
		due:               render(dueSQL, n),

		heldClaim: render(renderLive(heldClaimSQL, "$4"), n),
		heldAck:   render(heldAcknowledgement(ackSQL), n),
		heldRetry: render(held(retrySQL), n),
		heldDefer: render(held(deferSQL), n),
		heldFail:  render(held(failSQL), n),

		schemaVersion: `SELECT version, dirty FROM ` + n.QualifiedMigrationsTable() +
			` LIMIT 1`,
	}
}

// claimSQL leases a batch of one stream.
//
// Concurrency: FOR UPDATE SKIP LOCKED makes concurrent claimers take disjoint rows
// without waiting on each other; the outer UPDATE re-checks nothing because the rows
// are locked by this statement. ORDER BY (available_at, id) is the claim index's own
// order, so the plan walks only pending rows however many delivered rows are kept.
// A row inserted before migration 0004 has no dedup_id: the claim draws it, and since
// the lease is written in the same UPDATE it is drawn once, kept by every later claim
// of the row, so a re-publish carries the id the broker may already hold. A row past
// its expiry is left for the expiry sweep ({{live}}, expiry.go); the condition filters
// the claim index's entries and does not change the walk. The walk starts after $7, $8
// (Position): the index keeps an entry for every row acknowledged since the last
// VACUUM, ahead of the pending ones, and a claim that resumes where the previous one
// ended steps over none of them.
// Parameters: $1 stream, $2 limit, $3 token, $4 owner, $5 lease TTL in milliseconds, $6
// the stream's ttl in milliseconds (0: none), $7 and $8 the position to start after.
const claimSQL = `
WITH picked AS (
    SELECT id FROM {{table}}
    WHERE stream = $1 AND status = 'pending' AND available_at <= now() AND {{live}}
      AND (available_at, id) > ($7::timestamptz, $8::bigint)
    ORDER BY available_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS m
SET status = 'leased', lease_token = $3, owner = $4,
    lease_until = now() + $5 * interval '1 millisecond',
    dedup_id = coalesce(m.dedup_id, gen_random_uuid())
FROM picked
WHERE m.id = picked.id
RETURNING m.id, m.topic, m.key, m.headers, m.payload, coalesce(m.message_id, ''),
          m.dedup_id::text, m.attempts, m.created_at, m.deferred_since, m.lease_until,
          m.available_at`

// The write-backs below share one rule: a row changes only while it is leased under the
// presented token (status = 'leased' AND lease_token = $2). A lease that expired and was
// reclaimed or claimed again carries another token or none, so a stale replica's write
// matches nothing and is reported as refused. Each releases the lease in the same
// statement, which the table's lease constraint requires.

// ackSQL: the broker confirmed these rows; returns each row's delivery lag in µs (INSERT
// to acknowledgement, database clock), NULL for a row whose created_at a producer set to
// ±infinity (subtracting it fails, which would fail the acknowledgement of the whole
// batch for ever). Parameters: $1 ids, $2 token.
const ackSQL = `
UPDATE {{table}} AS m
SET status = 'delivered', published_at = now(), lease_token = NULL, lease_until = NULL,
    deferred_since = NULL
FROM unnest($1::bigint[]) AS w(id)
WHERE m.id = w.id AND m.status = 'leased' AND m.lease_token = $2
RETURNING CASE WHEN isfinite(m.created_at) THEN (extract(epoch FROM now() - m.created_at) * 1000000)::bigint END`

// ackDeleteSQL: the broker confirmed these rows and nothing keeps delivered rows; the
// same lease check as ackSQL. Parameters: $1 ids, $2 token.
const ackDeleteSQL = `
DELETE FROM {{table}} AS m
USING unnest($1::bigint[]) AS w(id)
WHERE m.id = w.id AND m.status = 'leased' AND m.lease_token = $2
RETURNING CASE WHEN isfinite(m.created_at) THEN (extract(epoch FROM now() - m.created_at) * 1000000)::bigint END`

// ackAgainSQL: ackSQL sent again after a try whose answer never came, which the database
// may have applied. The rows that try delivered are no longer leased, so the lease check
// refuses them; they are told apart from rows another replica took over by what they
// carry: delivered, claimed last by this owner ($3), and published no later than this
// claim's lease ran out ($4, the database's own lease_until of the claim). A row taken
// over was claimed again under another owner, or waits pending, or is leased under
// another token; a row this same replica claimed again could only be reclaimed after
// that lease ran out (the reclaim's predicate), so its delivery is later and it stays
// refused. An earlier try applied after the lease ran out but before any reclaim is
// refused too: a conflict counted that did not happen, never a delivery counted twice.
// The scan of the table sees the rows as they were before the CTE's UPDATE (one
// snapshot), so a row this statement itself delivers is counted once, as acknowledged.
// Parameters: $1 ids, $2 token, $3 owner, $4 the claim's lease_until. Returns per row:
// the lag in µs as ackSQL (acknowledged now), or already = true (delivered by the
// earlier try).
const ackAgainSQL = `
WITH acked AS (
    UPDATE {{table}} AS m
    SET status = 'delivered', published_at = now(), lease_token = NULL, lease_until = NULL,
        deferred_since = NULL
    FROM unnest($1::bigint[]) AS w(id)
    WHERE m.id = w.id AND m.status = 'leased' AND m.lease_token = $2
    RETURNING CASE WHEN isfinite(m.created_at) THEN (extract(epoch FROM now() - m.created_at) * 1000000)::bigint END AS lag_us
)
SELECT lag_us, false FROM acked
UNION ALL
SELECT NULL, true FROM {{table}} AS m
WHERE m.id = ANY($1::bigint[]) AND m.status = 'delivered' AND m.owner = $3
  AND m.published_at <= $4`

// releaseSQL: hand rows back unchanged, claimable at once. Parameters: $1 ids, $2 token.
const releaseSQL = `
UPDATE {{table}} AS m
SET status = 'pending', lease_token = NULL, lease_until = NULL
FROM unnest($1::bigint[]) AS w(id)
WHERE m.id = w.id AND m.status = 'leased' AND m.lease_token = $2`

// retrySQL: the broker refused; spend an attempt and wait out the backoff.
// Parameters: $1 ids, $2 token, $3 delays in milliseconds, $4 error texts.
const retrySQL = `
UPDATE {{table}} AS m
SET status = 'pending', attempts = m.attempts + 1, last_error = w.err,
    available_at = now() + w.delay_ms * interval '1 millisecond',
    lease_token = NULL, lease_until = NULL, deferred_since = NULL
FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS w(id, delay_ms, err)
WHERE m.id = w.id AND m.status = 'leased' AND m.lease_token = $2`

// deferSQL: the broker was unreachable and never saw the rows; no attempt is spent.
// deferred_since keeps the start of the first deferral; a row deferred for longer than
// the maximum ($5 ms, 0 = no maximum) is failed instead, in the same statement. The
// expiry is computed once per row in x (UPDATE … FROM cannot refer to the target row
// laterally); the row is ours while leased under $2, so nobody moves deferred_since
// between that read and the update, and a reclaimed row fails the token re-check.
// Parameters: $1 ids, $2 token, $3 delays in milliseconds, $4 error texts, $5 max defer ms.
const deferSQL = `
UPDATE {{table}} AS m
SET status = CASE WHEN x.expired THEN 'failed' ELSE 'pending' END,
    last_error = CASE WHEN x.expired
        THEN 'deferred for longer than max_defer (' || ($5 * interval '1 millisecond') || '): ' || x.err
        ELSE x.err END,
    available_at = CASE WHEN x.expired THEN m.available_at
        ELSE now() + x.delay_ms * interval '1 millisecond' END,
    deferred_since = CASE WHEN x.expired THEN NULL ELSE coalesce(m.deferred_since, now()) END,
    lease_token = NULL, lease_until = NULL
FROM (
    SELECT w.id, w.delay_ms, w.err,
           $5 > 0 AND t.deferred_since IS NOT NULL
               AND t.deferred_since < now() - $5 * interval '1 millisecond' AS expired
    FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS w(id, delay_ms, err)
    JOIN {{table}} AS t ON t.id = w.id
) AS x
WHERE m.id = x.id AND m.status = 'leased' AND m.lease_token = $2
RETURNING m.id, x.expired, m.attempts, m.last_error`

// failSQL: delivery ends for good; returns each row failed, as stored. Parameters: $1 ids, $2 token, $3 attempts spent by
// this outcome (0 or 1), $4 error texts.
const failSQL = `
UPDATE {{table}} AS m
SET status = 'failed', attempts = m.attempts + w.spent, last_error = w.err,
    lease_token = NULL, lease_until = NULL, deferred_since = NULL
FROM unnest($1::bigint[], $3::integer[], $4::text[]) AS w(id, spent, err)
WHERE m.id = w.id AND m.status = 'leased' AND m.lease_token = $2
RETURNING m.id, m.attempts, m.last_error`

// reclaimSQL hands expired leases back. Concurrency: SKIP LOCKED passes over rows whose
// write-back is in progress; the cleared token makes any later write-back of the old
// claim match nothing. The old expiry is read in the CTE because RETURNING sees the new
// row. Parameters: $1 limit. Returns microseconds each lease was overdue.
const reclaimSQL = `
WITH expired AS (
    SELECT id, lease_until FROM {{table}}
    WHERE status = 'leased' AND lease_until < now()
    ORDER BY lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS m
SET status = 'pending', lease_token = NULL, lease_until = NULL
FROM expired
WHERE m.id = expired.id
RETURNING (extract(epoch FROM now() - expired.lease_until) * 1000000)::bigint`

// purgeSQL deletes one chunk of delivered rows past retention, oldest first, walking the
// delivered index, and returns how many it deleted. In the same statement it moves each
// stream's purge horizon (migration 0007) up to the newest created_at it deleted, so a
// replay can tell that the rows before it are gone; the horizon and the deletion commit
// together. Concurrency: only delivered rows match, and nothing moves a row out of
// delivered; SKIP LOCKED keeps two purgers (a janitor whose lock connection died and its
// successor) from waiting on each other's rows, and the horizon's upsert only raises it
// (greatest), whichever commits first. Parameters: $1 retention ms, $2 limit.
const purgeSQL = `
WITH doomed AS (
    SELECT id FROM {{table}}
    WHERE status = 'delivered' AND published_at < now() - $1 * interval '1 millisecond'
    ORDER BY published_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {{table}} AS m
    USING doomed
    WHERE m.id = doomed.id
    RETURNING m.stream, m.created_at
), horizon AS (
    INSERT INTO {{purged}} AS p (stream, created_through, retention, purged_at)
    SELECT stream, max(created_at), $1 * interval '1 millisecond', now() FROM gone GROUP BY stream
    ON CONFLICT (stream) DO UPDATE
    SET created_through = greatest(p.created_through, excluded.created_through),
        retention = excluded.retention, purged_at = excluded.purged_at
)
SELECT count(*) FROM gone`
