package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/outboxd/outboxd/internal/ops"
)

// Outbox is one outbox table of a replica serving several (config outboxes): what
// Options gives for the one table, per outbox.
type Outbox struct {
	Name string
	// Store is nil while the outbox's database has not answered yet; Waiting says why.
	Store   Store
	Waiting func() string
	Streams []ops.Stream
	Drivers []ops.Driver
	// Breakers and Ready are as in Options, for this outbox.
	Breakers func() map[string]string
	Ready    []Check
}

// served is an outbox with its operations; ops is nil while it has no store.
type served struct {
	Outbox
	ops *ops.Ops
}

// DefaultOutbox names the one outbox of Options without Outboxes (config.DefaultOutbox).
const DefaultOutbox = "default"

// outboxesOf lists what the handler serves: Options.Outboxes, or the one table of
// Options.Store.
func outboxesOf(opt Options) []served {
	list := opt.Outboxes
	if len(list) == 0 {
		list = []Outbox{{Name: DefaultOutbox, Store: opt.Store, Streams: opt.Streams, Drivers: opt.Drivers,
			Breakers: opt.Breakers, Ready: opt.Ready}}
	}
	out := make([]served, len(list))
	for i, o := range list {
		out[i] = served{Outbox: o}
		if o.Store != nil {
			out[i].ops = ops.New(o.Store, opt.Now)
		}
	}
	return out
}

// errNotConnected is an outbox whose database has not answered yet.
var errNotConnected = errors.New("its database has not answered yet")

// waiting says why o has no store.
func (o served) waiting() error {
	if o.Waiting != nil {
		if why := o.Waiting(); why != "" {
			return errors.New(why)
		}
	}
	return errNotConnected
}

// pick chooses the outbox a request addresses (ops.Pick) and refuses one that is
// not connected yet with 503.
func (s *server) pick(outbox, stream string) (served, error) {
	targets := make([]ops.Target, len(s.outboxes))
	for i, o := range s.outboxes {
		targets[i] = ops.Target{Name: o.Name}
		for _, st := range o.Streams {
			targets[i].Streams = append(targets[i].Streams, st.Name)
		}
	}
	i, err := ops.Pick(targets, outbox, stream)
	if err != nil {
		return served{}, err
	}
	o := s.outboxes[i]
	if o.ops == nil {
		return served{}, &requestError{status: http.StatusServiceUnavailable, msg: "outbox " + o.Name + ": " + o.waiting().Error()}
	}
	return o, nil
}

// statsOf samples one outbox; Outbox is set where the replica serves a list.
func (s *server) statsOf(ctx context.Context, o served) (ops.Stats, error) {
	if o.ops == nil {
		return ops.Stats{}, o.waiting()
	}
	req := ops.StatsRequest{Streams: o.Streams, Drivers: o.Drivers}
	if o.Breakers != nil {
		req.Breakers = o.Breakers()
	}
	st, err := o.ops.Stats(ctx, req)
	if s.multi {
		st.Outbox = o.Name
	}
	return st, err
}

// allStats samples every outbox (ops.StatsOfEach); one that fails is reported in its
// entry, with its configured drivers.
func (s *server) allStats(ctx context.Context) ops.AllStats {
	names := make([]string, len(s.outboxes))
	for i, o := range s.outboxes {
		names[i] = o.Name
	}
	all, err := ops.StatsOfEach(names, func(i int) (ops.Stats, error) {
		o := s.outboxes[i]
		st, err := s.statsOf(ctx, o)
		if st.Drivers == nil {
			st.Drivers = o.Drivers
		}
		return st, err
	})
	if err != nil {
		s.log.Warn("stats of an outbox failed", "err", err)
	}
	return all
}
