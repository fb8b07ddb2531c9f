package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// UnservedStore is what the unserved-stream probe needs from the database.
type UnservedStore interface {
	UnservedStreams(ctx context.Context, served []string) ([]store.UnservedStream, error)
}

var _ UnservedStore = (*store.Store)(nil)

// unservedWarnEvery is how often the warning about the same unserved streams repeats;
// a stream that newly appears is warned about at once.
const unservedWarnEvery = 15 * time.Minute

// unservedLogNames bounds the streams one warning names.
const unservedLogNames = 10

// UnservedProbe samples the streams that have pending rows although no pipeline of this
// replica drains them: a row written under a stream nobody serves is never delivered, so
// it must be reported, not silently kept. It returns one UnservedStreams event per
// sample (empty when there are none) and logs a warning naming the streams, rate-limited.
// Replicas are expected to share one configuration; a replica configured with fewer
// streams reports the others' too. logger may be nil.
func UnservedProbe(served []string, st UnservedStore, logger *slog.Logger) Probe {
	_, logger = orDiscard(nil, logger)
	u := &unservedWarner{log: logger.With("component", "unserved")}
	served = slices.Clone(served)
	return Probe{Name: "unserved-stream", Sample: func(ctx context.Context) ([]events.Event, error) {
		found, err := st.UnservedStreams(ctx, served)
		if err != nil {
			return nil, err
		}
		ev := events.UnservedStreams{Streams: make([]events.UnservedStream, len(found))}
		for i, f := range found {
			ev.Streams[i] = events.UnservedStream{Stream: f.Stream, Pending: f.Pending, Oldest: f.Oldest}
		}
		u.warn(ev.Streams)
		return []events.Event{ev}, nil
	}}
}

// unservedWarner keeps what the last warning about unserved streams said.
type unservedWarner struct {
	log *slog.Logger

	mu       sync.Mutex // guards the warning state below
	warned   []string   // streams named by the last warning, sorted
	warnedAt time.Time
}

// warn logs the unserved streams when they differ from the last warning's, or when the
// last warning is unservedWarnEvery old; and once, at info level, when none are left.
func (s *unservedWarner) warn(streams []events.UnservedStream) {
	names := make([]string, len(streams))
	for i, u := range streams {
		names[i] = u.Stream
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	switch {
	case len(names) == 0 && len(s.warned) == 0:
		return
	case len(names) == 0:
		s.log.Info("no pending rows of unserved streams are left", "previously", strings.Join(s.warned, ", "))
		s.warned, s.warnedAt = nil, time.Time{}
		return
	case slices.Equal(names, s.warned) && now.Sub(s.warnedAt) < unservedWarnEvery:
		return
	}
	var total int64
	var oldest time.Duration
	for _, u := range streams {
		total += u.Pending
		oldest = max(oldest, u.Oldest)
	}
	s.log.Warn("pending rows of streams this replica does not serve: nobody delivers them unless "+
		"another replica's configuration routes these streams (a producer's typo, or a stream not configured yet)",
		"streams", describeUnserved(streams), "unserved_streams", len(streams),
		"unserved_messages", total, "oldest", oldest.Round(time.Second))
	s.warned, s.warnedAt = names, now
}

// describeUnserved names at most unservedLogNames streams with their backlog.
func describeUnserved(streams []events.UnservedStream) string {
	parts := make([]string, 0, min(len(streams), unservedLogNames)+1)
	for i, u := range streams {
		if i == unservedLogNames {
			parts = append(parts, fmt.Sprintf("and %d more", len(streams)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d pending, oldest %s)", quoteName(u.Stream), u.Pending, u.Oldest.Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

// quoteName quotes a stream name a producer wrote, cut to a readable length: it may be
// anything PostgreSQL text holds.
func quoteName(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}
