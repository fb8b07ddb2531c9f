package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ExactCountLimit is the largest count a backlog sample reports exactly. Counting reads
// every row counted (2.8 s of one core for a stream of 10,000,000 pending rows on a
// 2-core machine, every replica, every sample), so a count past this limit is estimated
// from a sample of the table's pages instead, at a cost that does not grow with the
// backlog (Backlog.Estimated).
const ExactCountLimit = 100_000

// backlogSamplePages is how many of the table's pages an estimate reads (16 MiB of 8 KiB
// pages): every page of a smaller table, which makes its estimate exact.
const backlogSamplePages = 2048

// Backlog is one stream's sampled state.
type Backlog struct {
	Stream           string
	Pending          int64
	Leased           int64
	Failed           int64
	Deferred         int64
	Expired          int64         // expired rows retention still keeps
	OldestPendingAge time.Duration // how long the oldest due pending row has waited; 0 when none is due
	// Estimated is set when a count past ExactCountLimit was estimated from a sample
	// of the table: Pending, Failed and Expired above the limit, and Deferred when
	// Pending is. Counts at or below the limit, and Leased, are always exact.
	Estimated bool
}

// backlogSQL samples the named streams, in the order named. Each count walks its
// partial index (claim, lease, failed, expired), so its cost follows the backlog, not
// the delivered rows kept, and stops one row past the limit ($2 = limit + 1): a count of
// $2 says "more than the limit", for backlogSampleSQL to estimate. Each ORDER BY is its
// index's own order, so that the walk streams and stops there (a bitmap scan would read
// every entry of the stream's before the LIMIT). Deferred rows are counted from their
// own partial index (migration 0008; before it, the count read every pending row), and
// only when the pending rows are within the limit (else NULL: a broker down under a
// backlog past the limit defers all of it, and the estimate covers them). The oldest
// pending age is how long the first row in claim order has been due (now -
// available_at: the claim index's first entry), so messages delayed on purpose or
// waiting out a retry backoff do not count as late; it is negative, and reported as 0,
// when nothing is due yet. A row a producer dated ±infinity has no age (subtracting it
// fails, which would fail the whole sample). It takes no locks.
// Parameters: $1 streams, $2 the limit + 1.
const backlogSQL = `
SELECT s.stream, p.n,
       (SELECT count(*) FROM {{table}} WHERE stream = s.stream AND status = 'leased'),
       (SELECT count(*) FROM (SELECT FROM {{table}} WHERE stream = s.stream AND status = 'failed'
                              ORDER BY id LIMIT $2) f),
       CASE WHEN p.n < $2 THEN
           (SELECT count(*) FROM {{table}}
             WHERE stream = s.stream AND status = 'pending' AND deferred_since IS NOT NULL)
       END,
       (SELECT count(*) FROM (SELECT FROM {{table}} WHERE stream = s.stream AND status = 'expired'
                              ORDER BY created_at LIMIT $2) e),
       (SELECT (extract(epoch FROM now() - min(available_at)) * 1000000)::bigint
          FROM {{table}} WHERE stream = s.stream AND status = 'pending'
            AND available_at > '-infinity' AND available_at < 'infinity')
FROM unnest($1::text[]) WITH ORDINALITY AS s(stream, i)
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (SELECT FROM {{table}} WHERE stream = s.stream AND status = 'pending'
                               ORDER BY available_at, id LIMIT $2) c
) p
ORDER BY s.i`

// backlogSampleSQL counts the named streams' rows by status in a sample of $2 percent
// of the table's pages (every page of every partition equally likely), for
// Backlogs to scale up. Parameters: $1 streams, $2 the percentage.
const backlogSampleSQL = `
SELECT stream,
       count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'pending' AND deferred_since IS NOT NULL),
       count(*) FILTER (WHERE status = 'expired')
FROM {{table}} TABLESAMPLE SYSTEM ($2)
WHERE stream = ANY ($1::text[])
GROUP BY stream`

// tablePagesSQL is the table's size in pages: a plain table's own, a partitioned
// table's partitions' (pg_partition_tree lists no plain table).
// Parameters: $1 the qualified table name.
const tablePagesSQL = `
SELECT greatest(pg_relation_size($1::regclass),
                (SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM pg_partition_tree($1::regclass)))
       / current_setting('block_size')::bigint`

// Backlogs samples the named streams, in the order named: exactly up to
// ExactCountLimit, estimated past it (Backlog.Estimated).
func (s *Store) Backlogs(ctx context.Context, streams []string) ([]Backlog, error) {
	if len(streams) == 0 {
		return nil, errors.New("backlogs: no streams named")
	}
	// Without JIT, also where the session has it on (the dispatcher's direct sessions
	// turn it off; the CLI's, and sessions behind a pooler, may not): the deferred
	// count's plan, run or not, is costed as a walk of every pending row, and compiling
	// the statement took longer (about 200 ms at 10,000,000 pending rows) than running it.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("sample backlog of %s: %w", s.table, err)
	}
	// Read only: rolled back when done. A rollback that cannot be sent (ctx ended)
	// closes the connection, which ends the transaction too.
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
		return nil, fmt.Errorf("sample backlog of %s: %w", s.table, err)
	}
	out, over, err := s.countBacklogs(ctx, tx, streams)
	if err != nil || len(over) == 0 {
		return out, err
	}
	return out, s.estimateBacklogs(ctx, tx, out, over)
}

// countBacklogs counts the streams' rows up to the limit; over indexes the backlogs with
// a count past it.
func (s *Store) countBacklogs(ctx context.Context, tx pgx.Tx, streams []string) (out []Backlog, over []int, err error) {
	limit := s.countLimit
	rows, err := tx.Query(ctx, s.sql.backlog, streams, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("sample backlog of %s: %w", s.table, err)
	}
	defer rows.Close()
	out = make([]Backlog, 0, len(streams))
	for rows.Next() {
		var b Backlog
		var deferred, ageUs *int64
		if err := rows.Scan(&b.Stream, &b.Pending, &b.Leased, &b.Failed, &deferred, &b.Expired, &ageUs); err != nil {
			return nil, nil, fmt.Errorf("sample backlog of %s: %w", s.table, err)
		}
		if deferred != nil {
			b.Deferred = *deferred
		}
		if ageUs != nil && *ageUs > 0 {
			b.OldestPendingAge = time.Duration(*ageUs) * time.Microsecond
		}
		if b.Pending > limit || b.Failed > limit || b.Expired > limit {
			over = append(over, len(out))
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sample backlog of %s: %w", s.table, err)
	}
	return out, over, nil
}

// estimateBacklogs replaces the counts of out[over] that stopped past the limit with
// estimates from one sample of the table's pages. A count known to exceed the limit is
// never estimated below it.
func (s *Store) estimateBacklogs(ctx context.Context, tx pgx.Tx, out []Backlog, over []int) error {
	var pages int64
	if err := tx.QueryRow(ctx, tablePagesSQL, s.table.Qualified()).Scan(&pages); err != nil {
		return fmt.Errorf("estimate backlog of %s: size the table: %w", s.table, err)
	}
	percent := 100.0
	if pages > s.samplePages {
		percent = 100 * float64(s.samplePages) / float64(pages)
	}
	names := make([]string, len(over))
	for j, i := range over {
		names[j] = out[i].Stream
	}
	rows, err := tx.Query(ctx, s.sql.backlogSample, names, percent)
	if err != nil {
		return fmt.Errorf("estimate backlog of %s: %w", s.table, err)
	}
	defer rows.Close()
	sampled := map[string][4]int64{} // pending, failed, deferred, expired
	for rows.Next() {
		var stream string
		var c [4]int64
		if err := rows.Scan(&stream, &c[0], &c[1], &c[2], &c[3]); err != nil {
			return fmt.Errorf("estimate backlog of %s: %w", s.table, err)
		}
		sampled[stream] = c
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("estimate backlog of %s: %w", s.table, err)
	}
	scaled := func(n int64) int64 { return int64(float64(n)*100/percent + 0.5) }
	limit := s.countLimit
	estimate := func(got *int64, n int64) {
		if *got > limit {
			*got = max(scaled(n), limit+1)
		}
	}
	for _, i := range over {
		b := &out[i]
		c := sampled[b.Stream] // zero when the sample met none of its rows
		if b.Pending > limit {
			b.Deferred = scaled(c[2])
		}
		estimate(&b.Pending, c[0])
		estimate(&b.Failed, c[1])
		estimate(&b.Expired, c[3])
		b.Estimated = percent < 100 // a sample of every page is exact
	}
	return nil
}
