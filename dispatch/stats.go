package dispatch

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// BacklogStore is what the sampler needs from the database.
type BacklogStore interface {
	Backlogs(ctx context.Context, streams []string) ([]store.Backlog, error)
}

var _ BacklogStore = (*store.Store)(nil)

// Sampler reports each stream's backlog on every replica, without any lock: a gauge that
// only one replica sampled would read zero on all the others.
type Sampler struct {
	streams  []string
	interval time.Duration
	store    BacklogStore
	emit     Emitter
	log      *slog.Logger
}

// NewSampler builds a sampler of streams every interval.
func NewSampler(streams []string, interval time.Duration, st BacklogStore, emit Emitter, logger *slog.Logger) *Sampler {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if emit == nil {
		emit = discardEmitter{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler{streams: streams, interval: interval, store: st, emit: emit, log: logger.With("component", "sampler")}
}

// Run samples at start and then every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) error {
	sampleEvery(ctx, s.interval, s.log, "backlog sample failed", s.Sample)
	return nil
}

// sampleEvery runs sample at once and then every interval (with jitter) until ctx ends,
// logging failures at the first and every 30th in a row so a down database does not
// flood the log.
func sampleEvery(ctx context.Context, interval time.Duration, log *slog.Logger, msg string, sample func(context.Context) error) {
	failures := 0
	for {
		if err := sample(ctx); err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%30 == 0 {
				log.Warn(msg, "err", err, "consecutive", failures)
			}
		} else {
			failures = 0
		}
		t := time.NewTimer(jitter(interval))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// Sample takes one sample and emits one Backlog event per stream.
func (s *Sampler) Sample(ctx context.Context) error {
	if len(s.streams) == 0 {
		return nil
	}
	backlogs, err := s.store.Backlogs(ctx, s.streams)
	if err != nil {
		return err
	}
	for _, b := range backlogs {
		s.emit.Emit(events.Backlog{Stream: b.Stream, Pending: b.Pending, Leased: b.Leased, Failed: b.Failed,
			Deferred: b.Deferred, OldestPendingAge: b.OldestPendingAge})
	}
	return nil
}

// BlockedStore is what the blocked-key sampler needs from the database.
type BlockedStore interface {
	Blocked(ctx context.Context, streams []string) ([]store.BlockedStream, error)
}

var _ BlockedStore = (*store.Store)(nil)

// BlockedSampler reports, on every replica and without any lock, the keys of ordered
// streams that a failed head holds up and the messages waiting behind them. A head that
// failed for good stops its key until an operator skips or requeues it; this sample is
// how that becomes visible (outboxd_ordered_blocked_keys).
type BlockedSampler struct {
	streams  []string
	interval time.Duration
	store    BlockedStore
	emit     Emitter
	log      *slog.Logger
}

// NewBlockedSampler builds a sampler of the ordered streams every interval.
func NewBlockedSampler(ordered []string, interval time.Duration, st BlockedStore, emit Emitter, logger *slog.Logger) *BlockedSampler {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if emit == nil {
		emit = discardEmitter{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &BlockedSampler{streams: slices.Clone(ordered), interval: interval, store: st, emit: emit,
		log: logger.With("component", "blocked-sampler")}
}

// Run samples at start and then every interval until ctx ends.
func (s *BlockedSampler) Run(ctx context.Context) error {
	sampleEvery(ctx, s.interval, s.log, "blocked-key sample failed", s.Sample)
	return nil
}

// Sample takes one sample and emits one BlockedKeys event per stream, zeros included,
// so that a gauge returns to 0 once the head is skipped or requeued.
func (s *BlockedSampler) Sample(ctx context.Context) error {
	if len(s.streams) == 0 {
		return nil
	}
	found, err := s.store.Blocked(ctx, s.streams)
	if err != nil {
		return err
	}
	byStream := make(map[string]store.BlockedStream, len(found))
	for _, b := range found {
		byStream[b.Stream] = b
	}
	for _, name := range s.streams {
		b := byStream[name]
		s.emit.Emit(events.BlockedKeys{Stream: name, Keys: b.Keys, Waiting: b.Waiting})
	}
	return nil
}
