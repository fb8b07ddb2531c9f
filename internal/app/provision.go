package app

import (
	"context"
	"log/slog"
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
// It logs what it created, so that a first start says where its messages go.
func provisionDrivers(ctx context.Context, cfg *config.Config, drivers map[string]router.Driver, logger *slog.Logger) error {
	for _, name := range slices.Sorted(maps.Keys(cfg.Drivers)) {
		dc, _ := cfg.Drivers[name].Options.(jetstream.Options)
		js, ok := drivers[name].(*jetstream.Driver)
		if !ok || !dc.Provision.Enabled {
			continue
		}
		subjects := routedSubjects(cfg, name)
		created, err := provisionStream(ctx, js, dc.Provision, subjects)
		if err != nil {
			return err
		}
		if created {
			logger.Info("created JetStream stream", "driver", name, "jetstream_stream", dc.Provision.Stream, "subjects", subjects)
		} else {
			logger.Info("JetStream stream exists; left as it is", "driver", name, "jetstream_stream", dc.Provision.Stream)
		}
	}
	return nil
}

func provisionStream(ctx context.Context, js *jetstream.Driver, p jetstream.Provision, subjects []string) (bool, error) {
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
