package ops

import (
	"context"
	"slices"

	"github.com/outboxd/outboxd/store"
)

// Stats is the answer of GET /api/v1/stats and of `outboxd stats --json`.
type Stats struct {
	// Outbox names the outbox when the replica serves an outboxes list.
	Outbox  string        `json:"outbox,omitempty"`
	Table   string        `json:"table"`
	Streams []StreamStats `json:"streams"`
	Drivers []Driver      `json:"drivers"`
}

// StreamStats is one stream's backlog and, where a dispatcher answers, its breaker.
type StreamStats struct {
	Stream string `json:"stream"`
	Driver string `json:"driver,omitempty"`
	// Breaker is closed, open or half-open; omitted where no dispatcher runs (the CLI).
	Breaker string `json:"breaker,omitempty"`
	Pending int64  `json:"pending"`
	Leased  int64  `json:"leased"`
	Failed  int64  `json:"failed"`
	// Expired counts the rows expired before delivery that retention still keeps.
	Expired                 int64   `json:"expired"`
	Deferred                int64   `json:"deferred"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// Ordered is set for a stream configured ordered; only such a stream has the
	// blocked counts.
	Ordered bool `json:"ordered,omitempty"`
	// BlockedKeys counts the keys whose head failed for good and was not skipped;
	// BlockedMessages the messages waiting behind them.
	BlockedKeys     *int64 `json:"blocked_keys,omitempty"`
	BlockedMessages *int64 `json:"blocked_messages,omitempty"`
	// Unserved marks a stream that has pending rows but is not configured: no pipeline
	// of a replica sharing this configuration delivers them (outboxd_unserved_messages).
	Unserved bool `json:"unserved,omitempty"`
	// Estimated marks a stream whose counts past store.ExactCountLimit were estimated
	// from a sample of the table's pages (Approximate says which).
	Estimated bool `json:"estimated,omitempty"`
}

// Approximate says which of s's counts are estimates: with Estimated, those past
// store.ExactCountLimit, and Deferred when Pending is one (deferred rows are counted
// among the pending ones).
func (s StreamStats) Approximate() (pending, failed, expired, deferred bool) {
	if !s.Estimated {
		return false, false, false, false
	}
	pending = s.Pending > store.ExactCountLimit
	return pending, s.Failed > store.ExactCountLimit, s.Expired > store.ExactCountLimit, pending
}

// StatsRequest names what Stats samples: the configured streams and drivers (as
// Describe returns them) and, where a dispatcher runs, its breakers' states.
type StatsRequest struct {
	Streams []Stream
	Drivers []Driver
	// Breakers maps a stream to its breaker's state; nil leaves the states out.
	Breakers map[string]string
	// EveryStream, when no stream is configured, samples every stream the table has
	// rows of (the CLI run without a configuration).
	EveryStream bool
}

// Stats samples the streams' backlogs and, for ordered streams, their blocked keys.
// When streams are configured (they name a driver), the streams that have pending rows
// but are not among them follow, marked unserved, after the configured ones: nobody
// delivers those rows, and a stats view that left them out would hide them. Streams
// without a driver are listed as given.
func (o *Ops) Stats(ctx context.Context, req StatsRequest) (Stats, error) {
	out := Stats{Table: o.store.Table().String(), Streams: []StreamStats{}, Drivers: req.Drivers}
	if out.Drivers == nil {
		out.Drivers = []Driver{}
	}
	streams := slices.Clip(req.Streams) // appends below never write into the caller's array
	if len(streams) == 0 && req.EveryStream {
		names, err := o.store.Streams(ctx)
		if err != nil {
			return Stats{}, err
		}
		for _, n := range names {
			streams = append(streams, Stream{Name: n})
		}
	}
	if len(streams) == 0 {
		return out, nil
	}
	names := make([]string, len(streams))
	var ordered, served []string
	for i, s := range streams {
		names[i] = s.Name
		if s.Ordered {
			ordered = append(ordered, s.Name)
		}
		if s.Driver != "" {
			served = append(served, s.Name)
		}
	}
	unserved := map[string]bool{}
	if len(served) > 0 {
		found, err := o.store.UnservedStreams(ctx, served)
		if err != nil {
			return Stats{}, err
		}
		for _, u := range found {
			if !slices.Contains(names, u.Stream) {
				unserved[u.Stream] = true
				names = append(names, u.Stream)
				streams = append(streams, Stream{Name: u.Stream})
			}
		}
	}
	backlogs, err := o.store.Backlogs(ctx, names)
	if err != nil {
		return Stats{}, err
	}
	blocked := map[string]store.BlockedStream{}
	if len(ordered) > 0 {
		found, err := o.store.Blocked(ctx, ordered)
		if err != nil {
			return Stats{}, err
		}
		for _, b := range found {
			blocked[b.Stream] = b
		}
	}
	for i, b := range backlogs {
		s := StreamStats{
			Stream: b.Stream, Driver: streams[i].Driver, Breaker: req.Breakers[b.Stream],
			Pending: b.Pending, Leased: b.Leased, Failed: b.Failed, Expired: b.Expired, Deferred: b.Deferred,
			OldestPendingAgeSeconds: b.OldestPendingAge.Seconds(), Unserved: unserved[b.Stream], Estimated: b.Estimated,
		}
		if streams[i].Ordered {
			bl := blocked[b.Stream]
			s.Ordered, s.BlockedKeys, s.BlockedMessages = true, &bl.Keys, &bl.Waiting
		}
		out.Streams = append(out.Streams, s)
	}
	return out, nil
}
