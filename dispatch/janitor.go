package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// JanitorStore is what the janitor needs from the database.
type JanitorStore interface {
	TryLock(ctx context.Context) (*store.Lock, error)
	Reclaim(ctx context.Context, limit int) ([]time.Duration, error)
	Purge(ctx context.Context, retention time.Duration, limit int) (int64, error)
}

var _ JanitorStore = (*store.Store)(nil)

// JanitorConfig tunes the janitor; zero values take the defaults noted.
type JanitorConfig struct {
	Interval     time.Duration // between cycles (30s)
	ReclaimBatch int           // expired leases per statement (1000)
	// ReclaimRounds bounds the statements per cycle (10): a mass expiry is worked off
	// over several cycles rather than in one enormous statement.
	ReclaimRounds int
	Retention     time.Duration // delivered rows older than this are purged (0: at once)
	PurgeBatch    int           // delivered rows per DELETE (5000)
	PurgeChunks   int           // DELETEs per cycle at most (200)
	// Partitions, when set, maintains a range-partitioned table in every cycle, in place
	// of the row-by-row purge.
	Partitions PartitionMaintainer
}

// PartitionMaintainer creates partitions ahead and drops expired ones; it runs under the
// janitor's lock.
type PartitionMaintainer interface {
	Maintain(ctx context.Context, emit Emitter) error
}

// Janitor keeps one outbox table healthy: it reclaims expired leases, purges delivered
// rows past retention and maintains partitions. It runs on every replica. Reclaiming runs
// in every cycle of every replica: its statement takes expired leases with SKIP LOCKED and
// clears their token, so concurrent reclaimers are safe, and no replica can hold it up.
// Purging and partition upkeep take the table's advisory lock without waiting and are
// skipped when another replica holds it, so that work happens once per deployment per
// cycle, and two deployments on two tables never block each other. (A replica frozen
// while it holds the lock, SIGSTOP or a stalled VM, delays only purging, never the
// reclaiming that lets the other replicas take over a dead replica's rows.)
type Janitor struct {
	cfg   JanitorConfig
	store JanitorStore
	emit  Emitter
	log   *slog.Logger
}

// NewJanitor builds a janitor; emit and logger may be nil.
func NewJanitor(cfg JanitorConfig, st JanitorStore, emit Emitter, logger *slog.Logger) *Janitor {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.ReclaimBatch <= 0 {
		cfg.ReclaimBatch = 1000
	}
	if cfg.ReclaimRounds <= 0 {
		cfg.ReclaimRounds = 10
	}
	if cfg.PurgeBatch <= 0 {
		cfg.PurgeBatch = 5000
	}
	if cfg.PurgeChunks <= 0 {
		cfg.PurgeChunks = 200
	}
	emit, logger = orDiscard(emit, logger)
	return &Janitor{cfg: cfg, store: st, emit: emit, log: logger.With("component", "janitor")}
}

// Run runs a cycle at start and then every Interval (with jitter) until ctx ends.
func (j *Janitor) Run(ctx context.Context) error {
	for {
		if _, err := j.Cycle(ctx); err != nil && ctx.Err() == nil {
			j.log.Error("janitor cycle failed", "err", err)
		}
		t := time.NewTimer(jitter(j.cfg.Interval))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// Cycle runs one janitor cycle: it reclaims expired leases, then, under the table's lock,
// purges or maintains partitions. It reports whether this replica did the locked work
// (false when another replica held the lock).
func (j *Janitor) Cycle(ctx context.Context) (bool, error) {
	start := time.Now()
	err := j.reclaim(ctx)
	lock, lerr := j.store.TryLock(ctx)
	if lerr != nil {
		err = errors.Join(err, lerr)
		j.emit.Emit(events.JanitorCycle{Duration: time.Since(start), Err: err})
		return false, err
	}
	if lock == nil {
		j.emit.Emit(events.JanitorCycle{Skipped: true, Duration: time.Since(start), Err: err})
		return false, err
	}
	defer lock.Release(ctx)
	if j.cfg.Partitions == nil {
		err = errors.Join(err, j.purge(ctx))
	} else if perr := j.cfg.Partitions.Maintain(ctx, j.emit); perr != nil {
		// On a partitioned table retention is a DROP of whole partitions; deleting
		// rows one by one would only add the work partitioning exists to avoid.
		err = errors.Join(err, fmt.Errorf("partitions: %w", perr))
	}
	j.emit.Emit(events.JanitorCycle{Duration: time.Since(start), Err: err})
	return true, err
}

func (j *Janitor) reclaim(ctx context.Context) error {
	var all []time.Duration
	defer func() {
		if len(all) > 0 {
			j.emit.Emit(events.LeasesReclaimed{Count: len(all), Overdue: all})
			j.log.Warn("reclaimed expired leases (a replica died or stalled)", "rows", len(all), "most_overdue", maxDuration(all))
		}
	}()
	for round := 0; round < j.cfg.ReclaimRounds; round++ {
		overdue, err := j.store.Reclaim(ctx, j.cfg.ReclaimBatch)
		all = append(all, overdue...)
		if err != nil {
			return err
		}
		if len(overdue) < j.cfg.ReclaimBatch {
			return nil
		}
	}
	return nil
}

func (j *Janitor) purge(ctx context.Context) error {
	start := time.Now()
	var deleted int64
	chunks := 0
	defer func() {
		if chunks > 0 {
			j.emit.Emit(events.RetentionSwept{Deleted: deleted, Chunks: chunks, Duration: time.Since(start)})
		}
	}()
	for chunks < j.cfg.PurgeChunks {
		n, err := j.store.Purge(ctx, j.cfg.Retention, j.cfg.PurgeBatch)
		if err != nil {
			return err
		}
		chunks++
		deleted += n
		if n < int64(j.cfg.PurgeBatch) {
			return nil
		}
	}
	return nil
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
