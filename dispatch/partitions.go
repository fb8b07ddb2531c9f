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
	store     PartitionStore
	interval  time.Duration
	ahead     int
	retention time.Duration
	log       *slog.Logger
}

// NewPartitions builds the upkeep of partitions interval long, ahead of them kept
// created, dropped after retention.
func NewPartitions(st PartitionStore, interval time.Duration, ahead int, retention time.Duration, logger *slog.Logger) *Partitions {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Partitions{store: st, interval: interval, ahead: ahead, retention: retention, log: logger.With("component", "partitions")}
}

// Maintain does one round of upkeep; each step runs even when an earlier one failed.
func (p *Partitions) Maintain(ctx context.Context, emit Emitter) error {
	created, errCreate := p.store.CreatePartitions(ctx, p.interval, p.ahead)
	for _, name := range created {
		emit.Emit(events.PartitionChanged{Partition: name, Created: true})
		p.log.Info("partition created", "partition", name)
	}
	dropped, errDrop := p.store.DropExpiredPartitions(ctx, p.retention)
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
