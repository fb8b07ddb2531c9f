package store

// Partitions of an outbox table created with the partitioned migration layout.
//
// Invariants:
//   - A time partition is dropped only inside a transaction that holds ACCESS EXCLUSIVE
//     locks on the table and on the partition and has seen, under those locks, that the
//     partition's upper bound and every row in it (all delivered or expired) are older
//     than now() − retention. A pending, leased or failed row is never dropped.
//   - Rows are never moved between partitions. A partition whose range already has rows
//     in the default partition is not created; the caller gets a PartitionOverlapError.
//   - Bounds come from the database clock and are UTC instants aligned to multiples of
//     the interval counted from the Unix epoch (a UTC midnight); a partition is named
//     <table>_p<YYYYMMDD>, or <table>_p<YYYYMMDDHHMM> when it does not start a UTC day
//     of a whole-day interval.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/table"
)

// PartitionInfo describes one partition of the outbox table.
type PartitionInfo struct {
	Name string // relation name, unquoted
	// From and To bound created_at, [From, To). Both are zero for the default partition;
	// a side left unbounded (MINVALUE, MAXVALUE, only if an operator made one) is zero.
	From, To time.Time
	Default  bool
}

// PartitionOverlapError reports a time partition that cannot be created because the
// default partition already holds rows dated inside its range: PostgreSQL refuses to
// attach it, and outboxd does not move rows by itself (docs/partitioning.md says how).
type PartitionOverlapError struct {
	Partition string // the partition that was not created
	Default   string // the default partition holding the rows
	From, To  time.Time
	Rows      int64 // rows of the default partition dated in [From, To)
}

func (e *PartitionOverlapError) Error() string {
	return fmt.Sprintf("create partition %s for [%s, %s): the default partition %s holds %d rows dated in that range; "+
		"move them out before this partition can be created (see docs/partitioning.md)",
		e.Partition, e.From.UTC().Format(time.RFC3339), e.To.UTC().Format(time.RFC3339), e.Default, e.Rows)
}

// partitionLockTimeout bounds every lock wait of partition upkeep. Creating and dropping
// need locks that queue ahead of producers and claims (see below); waiting longer than
// this for a long transaction to finish would stall them, so the attempt fails instead
// and the next janitor cycle tries again.
const partitionLockTimeout = "2s"

// partitionedSQL reports whether the table is partitioned: pg_class.relkind is 'p' for
// a partitioned table, 'r' for a plain one. Catalog read only; no table lock.
// Parameters: $1 schema, $2 table.
const partitionedSQL = `
SELECT c.relkind = 'p' FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`

// partitionsSQL lists the partitions of the table with their bounds, time partitions
// in range order and the default partition last. PostgreSQL exposes a bound only as
// text ("FOR VALUES FROM ('…') TO ('…')"); the literals are cast back in the same
// statement, so the session's TimeZone and DateStyle that printed them also read them.
// Catalog read only; no table lock: a caller that acts on the list re-reads it under
// its locks. Parameters: $1 schema, $2 table. The second column is the partition's name
// quoted by the database, for statements.
const partitionsSQL = `
SELECT c.relname, quote_ident(ns.nspname) || '.' || quote_ident(c.relname), c.oid = pt.partdefid,
       CASE WHEN r.b[1] IS NULL OR r.b[1] = 'MINVALUE' THEN NULL ELSE btrim(r.b[1], '''')::timestamptz END,
       CASE WHEN r.b[2] IS NULL OR r.b[2] = 'MAXVALUE' THEN NULL ELSE btrim(r.b[2], '''')::timestamptz END
FROM pg_class t
JOIN pg_namespace ts ON ts.oid = t.relnamespace
JOIN pg_partitioned_table pt ON pt.partrelid = t.oid
JOIN pg_inherits i ON i.inhparent = t.oid
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace ns ON ns.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                        '^FOR VALUES FROM \((.+)\) TO \((.+)\)$') AS b) r
WHERE ts.nspname = $1 AND t.relname = $2
ORDER BY 3, 4 NULLS FIRST, 1`

// wantedRangesSQL computes the ranges partition upkeep keeps covered, on the database
// clock: $2 consecutive intervals of $1 seconds, the first containing now(), aligned to
// multiples of $1 seconds since the Unix epoch. Reads nothing.
const wantedRangesSQL = `
SELECT to_timestamp(((x.f + g) * $1)::double precision), to_timestamp(((x.f + g + 1) * $1)::double precision)
FROM (SELECT floor(extract(epoch FROM now()) / $1) AS f) AS x, generate_series(0, $2 - 1) AS g
ORDER BY g`

// defaultRowsInRangeSQL counts the default partition's rows dated in [$1, $2). It runs
// before a partition is attached over that range, under no lock beyond ACCESS SHARE, so
// a doomed attach never holds its exclusive lock on the default partition while
// scanning it. A row inserted after the count makes the attach itself fail; that
// failure is reported the same way. {{partition}} is the default partition.
const defaultRowsInRangeSQL = `SELECT count(*) FROM {{partition}} WHERE created_at >= $1 AND created_at < $2`

// createPartitionSQL and attachPartitionSQL add one time partition, in one transaction.
// Attaching a separately created table takes SHARE UPDATE EXCLUSIVE on the outbox table,
// which producers' inserts and the dispatcher's claims and write-backs (ROW EXCLUSIVE)
// do not conflict with; CREATE TABLE … PARTITION OF would take ACCESS EXCLUSIVE on it
// and stop every producer meanwhile. The attach does take ACCESS EXCLUSIVE on the
// default partition, to prove by a scan that none of its rows belongs to the new range:
// claims, which touch every partition, wait for that scan, which is short while the
// default partition is near empty, as it should be. Producers inserting current rows do
// not touch the default partition. Constraints and indexes end up inherited from the
// table exactly as for a partition made with PARTITION OF. The bounds are formatted by
// Go from database-clock instants: DDL takes no parameters. {{partition}}, {{from}} and
// {{to}} are substituted per call.
const (
	createPartitionSQL = `CREATE TABLE {{partition}} (LIKE {{table}}
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)`
	attachPartitionSQL = `ALTER TABLE {{table}} ATTACH PARTITION {{partition}} FOR VALUES FROM ('{{from}}') TO ('{{to}}')`
)

// countRowsSQL counts the rows of one partition (the default one). No lock beyond
// ACCESS SHARE; the default partition is meant to stay near empty, so it is scanned.
const countRowsSQL = `SELECT count(*) FROM {{partition}}`

// partition is PartitionInfo with the name quoted for statements.
type partition struct {
	PartitionInfo
	ident string
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Partitioned reports whether the outbox table is partitioned (created with the
// partitioned layout).
func (s *Store) Partitioned(ctx context.Context) (bool, error) {
	var p bool
	err := s.pool.QueryRow(ctx, partitionedSQL, s.table.Schema, s.table.Table).Scan(&p)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("partitions of %s: the table does not exist", s.table)
	}
	if err != nil {
		return false, fmt.Errorf("partitions of %s: %w", s.table, err)
	}
	return p, nil
}

// requirePartitioned fails with a clear error on a plain table.
func (s *Store) requirePartitioned(ctx context.Context) error {
	p, err := s.Partitioned(ctx)
	if err != nil {
		return err
	}
	if !p {
		return fmt.Errorf("partitions of %s: the table is not partitioned (it was created with the plain layout)", s.table)
	}
	return nil
}

// Partitions lists the partitions of the table: time partitions in range order, then
// the default partition.
func (s *Store) Partitions(ctx context.Context) ([]PartitionInfo, error) {
	if err := s.requirePartitioned(ctx); err != nil {
		return nil, err
	}
	parts, err := s.partitions(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	out := make([]PartitionInfo, len(parts))
	for i, p := range parts {
		out[i] = p.PartitionInfo
	}
	return out, nil
}

func (s *Store) partitions(ctx context.Context, q querier) ([]partition, error) {
	rows, err := q.Query(ctx, partitionsSQL, s.table.Schema, s.table.Table)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", s.table, err)
	}
	var out []partition
	for rows.Next() {
		var p partition
		var from, to *time.Time
		if err := rows.Scan(&p.Name, &p.ident, &p.Default, &from, &to); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list partitions of %s: %w", s.table, err)
		}
		if from != nil {
			p.From = from.UTC()
		}
		if to != nil {
			p.To = to.UTC()
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", s.table, err)
	}
	return out, nil
}

// CreatePartitions makes sure time partitions cover ahead intervals from the start of
// the current one (database clock); at least the current and the next interval are
// covered whatever ahead says, so that a boundary passing between two janitor cycles
// never sends rows to the default partition. Ranges already covered, by partitions of
// another interval or made by hand, are left alone; only the gaps are created. It
// returns the names created. A range whose rows are already in the default partition
// is skipped with a *PartitionOverlapError and the others are still created; all such
// errors are returned joined.
func (s *Store) CreatePartitions(ctx context.Context, interval time.Duration, ahead int) (created []string, err error) {
	if interval < time.Minute || interval%time.Minute != 0 {
		return nil, fmt.Errorf("create partitions of %s: interval must be a whole number of minutes, at least one, got %s", s.table, interval)
	}
	if ahead < 1 {
		return nil, fmt.Errorf("create partitions of %s: ahead must be at least 1, got %d", s.table, ahead)
	}
	if err := s.requirePartitioned(ctx); err != nil {
		return nil, err
	}
	existing, err := s.partitions(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	var def *partition
	for i := range existing {
		if existing[i].Default {
			def = &existing[i]
		}
	}
	wanted, err := s.wantedRanges(ctx, interval, max(ahead, 2))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, w := range wanted {
		for _, gap := range uncovered(w, existing) {
			name := partitionName(s.table.Table, gap.from, interval)
			if err := s.createPartition(ctx, name, gap, def); err != nil {
				errs = append(errs, err)
				continue
			}
			created = append(created, name)
		}
	}
	return created, errors.Join(errs...)
}

type timeRange struct{ from, to time.Time }

func (s *Store) wantedRanges(ctx context.Context, interval time.Duration, n int) ([]timeRange, error) {
	rows, err := s.pool.Query(ctx, wantedRangesSQL, int64(interval/time.Second), n)
	if err != nil {
		return nil, fmt.Errorf("create partitions of %s: %w", s.table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (timeRange, error) {
		var tr timeRange
		err := r.Scan(&tr.from, &tr.to)
		return timeRange{tr.from.UTC(), tr.to.UTC()}, err
	})
	if err != nil {
		return nil, fmt.Errorf("create partitions of %s: %w", s.table, err)
	}
	return out, nil
}

// uncovered returns the parts of w that no time partition covers, in order. existing is
// in range order; a zero bound is unbounded on its side.
func uncovered(w timeRange, existing []partition) []timeRange {
	var gaps []timeRange
	cur := w.from
	for _, p := range existing {
		if p.Default {
			continue
		}
		endsAfter := p.To.IsZero() || p.To.After(cur)
		startsBefore := p.From.IsZero() || p.From.Before(w.to)
		if !endsAfter || !startsBefore {
			continue
		}
		if !p.From.IsZero() && p.From.After(cur) {
			gaps = append(gaps, timeRange{cur, p.From})
		}
		if p.To.IsZero() {
			return gaps
		}
		cur = p.To
		if !cur.Before(w.to) {
			return gaps
		}
	}
	return append(gaps, timeRange{cur, w.to})
}

// partitionName is <table>_p<YYYYMMDD>, with <HHMM> appended unless the interval is
// whole days and the range starts a UTC day. A name is at most MaxNameLen+14 bytes,
// within PostgreSQL's 63.
func partitionName(tableName string, from time.Time, interval time.Duration) string {
	from = from.UTC()
	if interval%(24*time.Hour) == 0 && from.Equal(from.Truncate(24*time.Hour)) {
		return tableName + "_p" + from.Format("20060102")
	}
	return tableName + "_p" + from.Format("200601021504")
}

// createPartition creates and attaches one partition in one transaction. def is the
// default partition, nil if there is none.
func (s *Store) createPartition(ctx context.Context, name string, r timeRange, def *partition) error {
	ident := table.Quote(s.table.Schema) + "." + table.Quote(name)
	overlap := func() error {
		var n int64
		if err := s.pool.QueryRow(ctx, partitionSQL(defaultRowsInRangeSQL, s.table, def.ident), r.from, r.to).Scan(&n); err != nil {
			return fmt.Errorf("create partition %s: count rows in the default partition: %w", name, err)
		}
		if n == 0 {
			return nil
		}
		return &PartitionOverlapError{Partition: name, Default: def.Name, From: r.from, To: r.to, Rows: n}
	}
	if def != nil {
		if err := overlap(); err != nil {
			return err
		}
	}
	const layout = "2006-01-02 15:04:05Z07:00"
	sql := func(text string) string {
		return partitionSQL(text, s.table, ident, "{{from}}", r.from.UTC().Format(layout), "{{to}}", r.to.UTC().Format(layout))
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, partitionLockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sql(createPartitionSQL)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql(attachPartitionSQL))
		return err
	})
	var pgErr *pgconn.PgError
	if def != nil && errors.As(err, &pgErr) && pgErr.Code == "23514" {
		// A row dated in the range reached the default partition after the count.
		if oerr := overlap(); oerr != nil {
			return oerr
		}
	}
	if err != nil {
		return fmt.Errorf("create partition %s for [%s, %s): %w", name,
			r.from.Format(time.RFC3339), r.to.Format(time.RFC3339), err)
	}
	return nil
}

// DefaultPartitionRows counts the rows in the default partition: rows dated outside
// every time partition. It should be zero; rows there block creating a partition over
// their range and are not dropped with any partition.
func (s *Store) DefaultPartitionRows(ctx context.Context) (int64, error) {
	if err := s.requirePartitioned(ctx); err != nil {
		return 0, err
	}
	parts, err := s.partitions(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	for _, p := range parts {
		if p.Default {
			var n int64
			if err := s.pool.QueryRow(ctx, partitionSQL(countRowsSQL, s.table, p.ident)).Scan(&n); err != nil {
				return 0, fmt.Errorf("count rows in %s: %w", p.Name, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("partitions of %s: the table has no default partition, so an INSERT dated outside every partition fails", s.table)
}

// partitionSQL renders a statement for the table and one partition, whose name is
// quoted (by table.Quote for names made here, by quote_ident for names read back from
// the catalog); extra pairs substitute further placeholders with values formatted here,
// never caller text.
func partitionSQL(sql string, n table.Name, partitionIdent string, extra ...string) string {
	r := strings.NewReplacer(append([]string{"{{table}}", n.Qualified(), "{{partition}}", partitionIdent}, extra...)...)
	return r.Replace(sql)
}
