package ops

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Target is one outbox a request may address: its name and its configured streams.
type Target struct {
	Name    string
	Streams []string
}

// Pick chooses, among the outboxes a replica serves, the one a request addresses: the
// one named outbox, else the only one, else the only one configuring stream. Anything
// else is ambiguous and refused (ErrInvalid): a write that guessed could requeue or skip
// messages of another service's table, and message ids repeat across tables.
func Pick(targets []Target, outbox, stream string) (int, error) {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Name
	}
	list := strings.Join(names, ", ")
	if outbox != "" {
		if i := slices.Index(names, outbox); i >= 0 {
			return i, nil
		}
		return 0, invalid("no outbox named %q; this replica serves %s", outbox, list)
	}
	if len(targets) == 1 {
		return 0, nil
	}
	if stream == "" {
		return 0, invalid("this replica serves several outboxes (%s): name one with outbox", list)
	}
	var in []int
	for i, t := range targets {
		if slices.Contains(t.Streams, stream) {
			in = append(in, i)
		}
	}
	switch len(in) {
	case 1:
		return in[0], nil
	case 0:
		return 0, invalid("stream %q is configured in none of the outboxes (%s): name the outbox with outbox", stream, list)
	}
	var both []string
	for _, i := range in {
		both = append(both, names[i])
	}
	return 0, invalid("stream %q is configured in several outboxes (%s): name one with outbox", stream, strings.Join(both, ", "))
}

// OutboxStats is one outbox's stats in the answer over several, or why they could not
// be read (its database is down or not reached yet): one outbox's trouble does not
// hide the others'.
type OutboxStats struct {
	Stats
	Error string `json:"error,omitempty"`
}

// AllStats is the answer of GET /api/v1/stats, and `outboxd stats --json`, when the
// replica serves several outboxes and the request names none.
type AllStats struct {
	Outboxes []OutboxStats `json:"outboxes"`
}

// StatsOfEach gathers the stats of the outboxes names lists, calling stats once per
// outbox in order: an outbox whose stats fail is reported in its entry, with whatever
// stats returned beside the error, and the others still show. The error joins every
// outbox's failure, each prefixed by its name; nil when all answered.
func StatsOfEach(names []string, stats func(i int) (Stats, error)) (AllStats, error) {
	all := AllStats{Outboxes: make([]OutboxStats, len(names))}
	var errs []error
	for i, name := range names {
		st, err := stats(i)
		st.Outbox = name
		if st.Streams == nil {
			st.Streams = []StreamStats{}
		}
		if st.Drivers == nil {
			st.Drivers = []Driver{}
		}
		all.Outboxes[i] = OutboxStats{Stats: st}
		if err != nil {
			all.Outboxes[i].Error = err.Error()
			errs = append(errs, fmt.Errorf("outbox %s: %w", name, err))
		}
	}
	return all, errors.Join(errs...)
}
