package store

// The drop of expired time partitions: what keeps a partition, the locks its drop takes,
// and the drop itself (the invariants are partitions.go's).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// partitionKeepsSQL tells whether the partition {{partition}} must be kept: its upper
// bound ($1) is not older than now() − retention ($2 ms), or it holds a row that is
// pending, leased, failed, or delivered within retention. Expired rows do not keep it:
// like the plain layout's purge (purgeExpiredSQL), their retention counts from
// created_at, and the whole partition's range is older than that. The table's status
// domain constraint makes the probes exhaustive, and each walks a partial index (claim,
// lease, failed, delivered), so the answer costs nothing like a scan of the delivered
// rows. Run once without locks to pass over partitions that are plainly kept, and
// again under the drop's locks, where its fresh snapshot sees every committed change.
const partitionKeepsSQL = `
SELECT NOT ($1::timestamptz < now() - $2 * interval '1 millisecond')
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'pending')
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'leased')
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'failed')
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'delivered'
                                            AND published_at >= now() - $2 * interval '1 millisecond')`

// lockTableForDropSQL and lockPartitionForDropSQL take, in this order, the locks a
// partition's drop needs, before partitionKeepsSQL checks it again.
//   - ACCESS EXCLUSIVE on the table waits for every transaction that inserted, claimed,
//     wrote back or requeued through it (each holds ROW EXCLUSIVE on the table until it
//     ends) and keeps new ones out until commit: no row can enter or change in the
//     partition between the check and the drop, neither an INSERT carrying an old
//     created_at nor a requeue. Nothing weaker serves: DROP TABLE takes this lock on
//     the table anyway (and on the default partition).
//   - ACCESS EXCLUSIVE on the partition does the same for anyone who addresses the
//     partition by name.
//
// Taking them before the check, table first as every statement through the table does,
// means no lock is ever upgraded (an upgrade could deadlock with a claim). ONLY keeps
// the table's lock from recursing to every partition.
const (
	lockTableForDropSQL     = `LOCK TABLE ONLY {{table}} IN ACCESS EXCLUSIVE MODE`
	lockPartitionForDropSQL = `LOCK TABLE ONLY {{partition}} IN ACCESS EXCLUSIVE MODE`
)

// partitionHorizonSQL raises the purge horizon of every stream (stream ”) to just
// before the partition's upper bound ($1), when the partition holds a row, in the
// transaction that drops it: every row it held was created before that bound, and a
// replay reaching back past it is refused (migration 0007). Rows are timestamps in
// microseconds, so the bound less one microsecond is the newest instant it could hold.
// $2 is the retention in ms.
const partitionHorizonSQL = `
INSERT INTO {{purged}} AS p (stream, created_through, retention, purged_at)
SELECT '', $1::timestamptz - interval '1 microsecond', $2 * interval '1 millisecond', now()
WHERE EXISTS (SELECT 1 FROM {{partition}})
ON CONFLICT (stream) DO UPDATE
SET created_through = greatest(p.created_through, excluded.created_through),
    retention = excluded.retention, purged_at = excluded.purged_at`

// dropPartitionSQL drops a checked partition, under the locks above.
const dropPartitionSQL = `DROP TABLE {{partition}}`

// DropExpiredPartitions drops every time partition whose upper bound is older than
// now() − retention and whose rows are all delivered and published before then (an
// empty one included). Each drop is its own short transaction (see lockTableForDropSQL); a
// partition that cannot be locked within partitionLockTimeout is left for the next call
// and reported in the joined error. The default partition is never dropped. It returns
// the names dropped.
func (s *Store) DropExpiredPartitions(ctx context.Context, retention time.Duration) (dropped []string, err error) {
	if retention < 0 {
		return nil, fmt.Errorf("drop partitions of %s: retention must not be negative, got %s", s.table, retention)
	}
	if err := s.requirePartitioned(ctx); err != nil {
		return nil, err
	}
	parts, err := s.partitions(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range parts {
		if p.Default || p.To.IsZero() {
			continue
		}
		keep, err := s.partitionKeeps(ctx, s.pool, p, retention)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if keep {
			continue
		}
		ok, err := s.dropPartition(ctx, p, retention)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			dropped = append(dropped, p.Name)
		}
	}
	return dropped, errors.Join(errs...)
}

func (s *Store) partitionKeeps(ctx context.Context, q querier, p partition, retention time.Duration) (bool, error) {
	var keep bool
	err := q.QueryRow(ctx, partitionSQL(partitionKeepsSQL, s.table, p.ident), p.To, retention.Milliseconds()).Scan(&keep)
	if err != nil {
		return false, fmt.Errorf("check partition %s: %w", p.Name, err)
	}
	return keep, nil
}

// dropPartition locks, checks again and drops p in one transaction. It reports false
// when the check under the locks keeps the partition, or it is gone or changed.
func (s *Store) dropPartition(ctx context.Context, p partition, retention time.Duration) (bool, error) {
	dropped := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, partitionLockTimeout); err != nil {
			return err
		}
		for _, lock := range []string{lockTableForDropSQL, lockPartitionForDropSQL} {
			if _, err := tx.Exec(ctx, partitionSQL(lock, s.table, p.ident)); err != nil {
				return err
			}
		}
		// Under the locks: is it still this table's partition with the same bounds?
		current, err := s.partitions(ctx, tx)
		if err != nil {
			return err
		}
		same := false
		for _, q := range current {
			if q.ident == p.ident && !q.Default && q.From.Equal(p.From) && q.To.Equal(p.To) {
				same = true
			}
		}
		if !same {
			return nil
		}
		keep, err := s.partitionKeeps(ctx, tx, p, retention)
		if err != nil || keep {
			return err
		}
		if _, err := tx.Exec(ctx, partitionSQL(partitionHorizonSQL, s.table, p.ident, "{{purged}}", s.table.Derived("purged")),
			p.To, retention.Milliseconds()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, partitionSQL(dropPartitionSQL, s.table, p.ident)); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // dropped by someone else meanwhile
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("drop partition %s: %w", p.Name, err)
	}
	return dropped, nil
}
