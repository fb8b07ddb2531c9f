package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// DefaultSampleInterval is how often a Sampler samples when its configuration says 0.
const DefaultSampleInterval = 10 * time.Second

// Probe is one named measurement a Sampler takes: Sample returns the events one sample
// emits. A probe holds no lock and runs on every replica: a gauge that only one replica
// sampled would read zero on all the others.
type Probe struct {
	// Name says what failed in the sampler's log line ("<name> sample failed").
	Name   string
	Sample func(ctx context.Context) ([]events.Event, error)
}

// SamplerConfig tunes a Sampler; zero values take the defaults noted.
type SamplerConfig struct {
	Interval time.Duration // between samples of each probe (DefaultSampleInterval)
	Probes   []Probe
}

// Sampler runs its probes every interval and emits what they return. Each probe keeps
// its own schedule, so a slow probe does not delay the others, and its failures are
// logged through one path: the first, and every 30th in a row, so that a database that
// is down does not flood the log.
type Sampler struct {
	cfg  SamplerConfig
	emit Emitter
	log  *slog.Logger
}

// NewSampler builds a sampler; emit and logger may be nil.
func NewSampler(cfg SamplerConfig, emit Emitter, logger *slog.Logger) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSampleInterval
	}
	cfg.Probes = slices.Clone(cfg.Probes)
	emit, logger = orDiscard(emit, logger)
	return &Sampler{cfg: cfg, emit: emit, log: logger.With("component", "sampler")}
}

// Run samples every probe at start and then every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, p := range s.cfg.Probes {
		wg.Go(func() { s.every(ctx, p) })
	}
	wg.Wait()
	return nil
}

// Sample takes one sample of every probe, in order, and emits its events; the errors of
// the probes that failed are returned joined.
func (s *Sampler) Sample(ctx context.Context) error {
	var errs []error
	for _, p := range s.cfg.Probes {
		errs = append(errs, s.sample(ctx, p))
	}
	return errors.Join(errs...)
}

// sample takes one sample of p and emits its events.
func (s *Sampler) sample(ctx context.Context, p Probe) error {
	evs, err := p.Sample(ctx)
	if err != nil {
		return fmt.Errorf("sample %s: %w", p.Name, err)
	}
	for _, e := range evs {
		s.emit.Emit(e)
	}
	return nil
}

// maxProbeShare bounds the share of its time a probe spends sampling: a sample that
// took d is followed by a wait of at least d / maxProbeShare. Every replica samples, and
// a probe's cost can follow what it counts (the backlog's counts stop at
// store.ExactCountLimit and estimate past it; the blocked keys and the unserved streams
// are counted row by row).
const maxProbeShare = 0.05

// every samples p at once and then every interval (with jitter), or less often when
// its samples are slow (maxProbeShare), until ctx ends.
func (s *Sampler) every(ctx context.Context, p Probe) {
	failures := 0
	for {
		start := time.Now()
		err := s.sample(ctx, p)
		wait := max(jitter(s.cfg.Interval), time.Duration(float64(time.Since(start))/maxProbeShare))
		if err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%30 == 0 {
				s.log.Warn(p.Name+" sample failed", "probe", p.Name, "err", err, "consecutive", failures)
			}
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// BacklogStore is what the backlog probe needs from the database.
type BacklogStore interface {
	Backlogs(ctx context.Context, streams []string) ([]store.Backlog, error)
}

var _ BacklogStore = (*store.Store)(nil)

// BacklogProbe samples each stream's backlog: one Backlog event per stream.
func BacklogProbe(streams []string, st BacklogStore) Probe {
	streams = slices.Clone(streams)
	return Probe{Name: "backlog", Sample: func(ctx context.Context) ([]events.Event, error) {
		if len(streams) == 0 {
			return nil, nil
		}
		backlogs, err := st.Backlogs(ctx, streams)
		if err != nil {
			return nil, err
		}
		out := make([]events.Event, len(backlogs))
		for i, b := range backlogs {
			out[i] = events.Backlog{Stream: b.Stream, Pending: b.Pending, Leased: b.Leased, Failed: b.Failed,
				Deferred: b.Deferred, OldestPendingAge: b.OldestPendingAge}
		}
		return out, nil
	}}
}

// BlockedStore is what the blocked-key probe needs from the database.
type BlockedStore interface {
	Blocked(ctx context.Context, streams []string) ([]store.BlockedStream, error)
}

var _ BlockedStore = (*store.Store)(nil)

// BlockedProbe samples the keys of the ordered streams that a failed head holds up and
// the messages waiting behind them. A head that failed for good stops its key until an
// operator skips or requeues it; this sample is how that becomes visible
// (outboxd_ordered_blocked_keys). It returns one BlockedKeys event per stream, zeros
// included, so that a gauge returns to 0 once the head is skipped or requeued.
func BlockedProbe(ordered []string, st BlockedStore) Probe {
	ordered = slices.Clone(ordered)
	return Probe{Name: "blocked-key", Sample: func(ctx context.Context) ([]events.Event, error) {
		if len(ordered) == 0 {
			return nil, nil
		}
		found, err := st.Blocked(ctx, ordered)
		if err != nil {
			return nil, err
		}
		byStream := make(map[string]store.BlockedStream, len(found))
		for _, b := range found {
			byStream[b.Stream] = b
		}
		out := make([]events.Event, len(ordered))
		for i, name := range ordered {
			b := byStream[name]
			out[i] = events.BlockedKeys{Stream: name, Keys: b.Keys, Waiting: b.Waiting}
		}
		return out, nil
	}}
}

// ReplayStore is what the replay probe needs from the database.
type ReplayStore interface {
	ReplayStandings(ctx context.Context, streams []string) ([]store.ReplayStanding, error)
}

var _ ReplayStore = (*store.Store)(nil)

// ReplayProbe samples the replays of each stream (outboxd_replays_running,
// outboxd_replay_remaining_messages, outboxd_replay_messages_total): one ReplayProgress
// event per stream, zeros included. It reads the replays table only, whose rows are
// one per replay ever made.
func ReplayProbe(streams []string, st ReplayStore) Probe {
	streams = slices.Clone(streams)
	return Probe{Name: "replay", Sample: func(ctx context.Context) ([]events.Event, error) {
		if len(streams) == 0 {
			return nil, nil
		}
		found, err := st.ReplayStandings(ctx, streams)
		if err != nil {
			return nil, err
		}
		out := make([]events.Event, len(found))
		for i, r := range found {
			out[i] = events.ReplayProgress{Stream: r.Stream, Running: r.Running, Remaining: r.Remaining, Copied: r.Copied}
		}
		return out, nil
	}}
}
