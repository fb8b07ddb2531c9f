package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// PartitionStore is what partition upkeep needs from the database.
type PartitionStore interface {
	CreatePartitions(ctx context.Context, interval time.Duration, ahead int) ([]string, error)
	DropExpiredPartitions(ctx context.Context, retention time.Duration) ([]string, error)
	DefaultPartitionRows(ctx context.Context) (int64, error)
}

var _ PartitionStore = (*store.Store)(nil)

// Partitions keeps a range-partitioned outbox table's partitions: created ahead of
// time, dropped once every row in them is delivered and past retention, and the rows
// that landed in the default partition reported. It runs inside the janitor's cycle,
// under its lock; on a partitioned table retention is a DROP, so the janitor does not
// DELETE delivered rows.
type Partitions struct {
	cfg   PartitionsConfig
	store PartitionStore
	log   *slog.Logger
}

// PartitionsConfig says which partitions the upkeep keeps.
type PartitionsConfig struct {
	Interval  time.Duration // the time range of one partition
	Ahead     int           // partitions kept created ahead of now
	Retention time.Duration // a partition is dropped once all of it is older than this
}

// NewPartitions builds the upkeep of partitions; logger may be nil.
func NewPartitions(cfg PartitionsConfig, st PartitionStore, logger *slog.Logger) *Partitions {
	_, logger = orDiscard(nil, logger)
	return &Partitions{cfg: cfg, store: st, log: logger.With("component", "partitions")}
}

// Maintain does one round of upkeep; each step runs even when an earlier one failed.
func (p *Partitions) Maintain(ctx context.Context, emit Emitter) error {
	created, errCreate := p.store.CreatePartitions(ctx, p.cfg.Interval, p.cfg.Ahead)
	for _, name := range created {
		emit.Emit(events.PartitionChanged{Partition: name, Created: true})
		p.log.Info("partition created", "partition", name)
	}
	dropped, errDrop := p.store.DropExpiredPartitions(ctx, p.cfg.Retention)
	for _, name := range dropped {
		emit.Emit(events.PartitionChanged{Partition: name})
		p.log.Info("partition dropped", "partition", name)
	}
	rows, errRows := p.store.DefaultPartitionRows(ctx)
	if errRows == nil {
		emit.Emit(events.DefaultPartitionRows{Rows: rows})
		if rows > 0 {
			p.log.Warn("rows in the default partition: they are outside every time partition (docs/partitioning.md)", "rows", rows)
		}
	}
	return errors.Join(errCreate, errDrop, errRows)
}
