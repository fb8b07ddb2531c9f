package nats

import (
	"github.com/outboxd/outboxd/router/natsconn"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "nats"

// Options configure the core NATS driver: the connection settings both NATS drivers
// share, and nothing of its own.
type Options struct {
	natsconn.Options `yaml:",inline"`
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options { return Options{Options: natsconn.DefaultOptions()} }
