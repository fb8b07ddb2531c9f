package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	jsdrv "github.com/outboxd/outboxd/router/jetstream"
	kafkadrv "github.com/outboxd/outboxd/router/kafka"
	natsdrv "github.com/outboxd/outboxd/router/nats"
)

// benchDest is one destination the bench drains to: how the drain's dispatcher reaches
// it, and how the bench counts, at the destination, what arrived.
//
// Adding a destination is a file of its own (dest_<type>.go) holding its benchDest, one
// line in benchDests, and, when it needs an address, a flag on Options (flags.go) with the
// machine's usual address as default.
type benchDest struct {
	typ string
	// byDefault puts it in --drivers's default: only destinations that need nothing
	// the bench cannot start itself (an embedded broker, the bench's own database, an
	// in-process sink), so that `outboxd bench` runs on a bare machine.
	byDefault bool
	// options returns the driver's options for a run. Before setup, o.addrs is empty and
	// options must still return options that validate (resolve checks them before
	// anything starts); after it, o.addrs[typ] holds what setup returned.
	options func(o benchOptions) router.Options
	// setup, when not nil, prepares the destination once per run, before any phase: a
	// sink to start, a connection to check. It returns the address the driver is given
	// (kept in o.addrs[typ]), a description for the report's settings, and a closer
	// called when the run ends (nil: nothing to close). A destination that cannot be
	// reached fails here, naming the flag that points elsewhere.
	setup func(ctx context.Context, b *bench) (addr, describe string, closer func(), err error)
	// environ returns the driver's options the drain's dispatcher process needs, as
	// the keys of its drivers.<name> section (BROKERS, URL, ...) and their values: the
	// child is configured through OUTBOXD_ variables (benchEnviron).
	environ func(o router.Options) map[string]string
	// inBench reports whether, with these options, the destination does its work in the
	// bench's own process (an embedded broker, an in-process sink), so that the drain's
	// bench_cpu_seconds holds it and broker_bound_ratio_to_discard can be computed; nil:
	// it does not.
	inBench func(o Options) bool
	// arrivals prepares the count of one drain before its dispatcher starts (a queue
	// emptied, a high-water mark read); its count runs once the dispatcher has stopped.
	arrivals func(ctx context.Context, b *bench) (arrivalCounter, error)
}

// benchDests are the destinations the bench knows, in report order.
var benchDests = []benchDest{
	{typ: discard.Type, byDefault: true,
		options:  func(benchOptions) router.Options { return discard.DefaultOptions() },
		environ:  func(router.Options) map[string]string { return nil },
		inBench:  func(Options) bool { return true }, // nothing to do: the bound is 1
		arrivals: func(context.Context, *bench) (arrivalCounter, error) { return discardCounter{}, nil }},
	{typ: jsdrv.Type, byDefault: true,
		options: func(o benchOptions) router.Options {
			j := jsdrv.DefaultOptions()
			j.URL = o.natsURL
			return j
		},
		environ:  func(o router.Options) map[string]string { return map[string]string{"URL": o.(jsdrv.Options).URL} },
		inBench:  func(o Options) bool { return o.NATSURL == "" },
		arrivals: func(ctx context.Context, b *bench) (arrivalCounter, error) { return b.nats.purge(ctx) }},
	{typ: kafkadrv.Type, byDefault: true,
		options: func(o benchOptions) router.Options {
			k := kafkadrv.DefaultOptions()
			k.Brokers = o.kafkaBrokers
			return k
		},
		environ: func(o router.Options) map[string]string {
			return map[string]string{"BROKERS": strings.Join(o.(kafkadrv.Options).Brokers, ",")}
		},
		inBench:  func(o Options) bool { return o.KafkaBrokers == "" },
		arrivals: func(ctx context.Context, b *bench) (arrivalCounter, error) { return b.kafka.mark(ctx) }},
	{typ: natsdrv.Type, byDefault: true,
		options: func(o benchOptions) router.Options {
			n := natsdrv.DefaultOptions()
			n.URL = o.natsURL
			return n
		},
		environ:  func(o router.Options) map[string]string { return map[string]string{"URL": o.(natsdrv.Options).URL} },
		inBench:  func(o Options) bool { return o.NATSURL == "" },
		arrivals: func(_ context.Context, b *bench) (arrivalCounter, error) { return b.nats.subscribe() }},
	httpDest,
	redisDest,
	rabbitDest,
	postgresDest,
}

// benchDrivers lists the driver types the bench knows, in report order.
var benchDrivers = func() []string {
	types := make([]string, len(benchDests))
	for i, d := range benchDests {
		types[i] = d.typ
	}
	return types
}()

// defaultDrivers lists the types measured when --drivers is not given.
func defaultDrivers() []string {
	var types []string
	for _, d := range benchDests {
		if d.byDefault {
			types = append(types, d.typ)
		}
	}
	return types
}

// destOf finds a destination by driver type.
func destOf(typ string) (benchDest, error) {
	i := slices.IndexFunc(benchDests, func(d benchDest) bool { return d.typ == typ })
	if i < 0 {
		return benchDest{}, fmt.Errorf("bench: no destination for driver type %q", typ)
	}
	return benchDests[i], nil
}
