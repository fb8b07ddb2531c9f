package main

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/jetstream"
)

// provisionTimeout bounds creating the destinations of one driver at start.
const provisionTimeout = 30 * time.Second

// provisionDrivers creates, for every jetstream driver with provision.enabled, the
// stream capturing what is routed to it: "<topic_prefix>>" of each outbox stream and
// each dead-letter subject. Kafka drivers create missing topics as they publish.
func provisionDrivers(ctx context.Context, cfg *config.Config, drivers map[string]router.Driver) error {
	for _, name := range slices.Sorted(maps.Keys(cfg.Drivers)) {
		dc := cfg.Drivers[name]
		js, ok := drivers[name].(*jetstream.Driver)
		if !ok || dc.Type != config.TypeJetStream || !dc.Provision.Enabled {
			continue
		}
		if err := provisionStream(ctx, js, dc.Provision, routedSubjects(cfg, name)); err != nil {
			return err
		}
	}
	return nil
}

func provisionStream(ctx context.Context, js *jetstream.Driver, p config.Provision, subjects []string) error {
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	return js.Provision(ctx, p, subjects)
}

// routedSubjects lists the subjects that streams route to driver: each outbox stream's
// topic_prefix followed by ">" (Validate makes every such prefix end with "."), then
// each dead-letter subject, without repeats.
func routedSubjects(cfg *config.Config, driver string) []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Streams)) {
		if s := cfg.Streams[name]; s.Driver == driver {
			add(s.TopicPrefix + ">")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Streams)) {
		if dl := cfg.Streams[name].DeadLetter; dl.Driver == driver {
			add(dl.Topic)
		}
	}
	return out
}
