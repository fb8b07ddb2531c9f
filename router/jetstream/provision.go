package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Provision makes sure a stream named p.Stream exists, creating it to capture subjects
// with p's settings when it does not. A stream of that name that exists already is
// left as it is, whatever it captures: it belongs to whoever made it. It fails when
// the server cannot be asked or refuses the stream (a subject another stream captures,
// replicas the cluster cannot place), saying which. It reports whether it created the
// stream.
func (d *Driver) Provision(ctx context.Context, p Provision, subjects []string) (created bool, err error) {
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("driver %s: provision JetStream stream %q for %v: %w", d.name, p.Stream, subjects, err)
	}
	cfg, err := streamConfig(p, subjects)
	if err != nil {
		return fail(err)
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		return fail(err)
	}
	if _, err := js.Stream(ctx, p.Stream); err == nil {
		return false, nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fail(err)
	}
	_, err = js.CreateStream(ctx, cfg)
	switch {
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse): // another replica was first
		return false, nil
	case err != nil:
		return fail(err)
	}
	return true, nil
}

// streamConfig is the stream p describes, capturing subjects.
func streamConfig(p Provision, subjects []string) (jetstream.StreamConfig, error) {
	cfg := jetstream.StreamConfig{Name: p.Stream, Subjects: subjects, Replicas: p.Replicas, Duplicates: p.DuplicateWindow}
	if len(subjects) == 0 {
		return cfg, errors.New("no subjects: no outbox stream is routed to the driver")
	}
	switch p.Retention {
	case "", "limits":
		cfg.Retention = jetstream.LimitsPolicy
	case "interest":
		cfg.Retention = jetstream.InterestPolicy
	case "workqueue":
		cfg.Retention = jetstream.WorkQueuePolicy
	default:
		return cfg, fmt.Errorf("retention %q: want limits, interest or workqueue", p.Retention)
	}
	switch p.Storage {
	case "", "file":
		cfg.Storage = jetstream.FileStorage
	case "memory":
		cfg.Storage = jetstream.MemoryStorage
	default:
		return cfg, fmt.Errorf("storage %q: want file or memory", p.Storage)
	}
	return cfg, nil
}
