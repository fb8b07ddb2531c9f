package jetstream

import (
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/router/natsconn"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "jetstream"

// Defaults the driver falls back to when its options leave them zero.
const (
	DefaultMaxInFlight = 1024
)

// Options configure the JetStream driver: the connection settings both NATS drivers
// share, the window of messages awaiting their PubAck, and provisioning.
type Options struct {
	natsconn.Options `yaml:",inline"`
	MaxInFlight      int `yaml:"max_in_flight"`
	// Provision creates the JetStream stream at start when it is missing; off by
	// default, because streams are usually owned by whoever runs the broker.
	Provision Provision `yaml:"provision"`
}

// Provision describes the one JetStream stream capturing "<topic_prefix>>" of every
// outbox stream routed to the driver, created at start when missing.
type Provision struct {
	Enabled         bool          `yaml:"enabled"`
	Stream          string        `yaml:"stream"`
	Retention       string        `yaml:"retention"`
	Storage         string        `yaml:"storage"`
	Replicas        int           `yaml:"replicas"`
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{
		Options:     natsconn.DefaultOptions(),
		MaxInFlight: DefaultMaxInFlight,
		Provision:   Provision{Retention: "limits", Storage: "file", Replicas: 1, DuplicateWindow: 2 * time.Minute},
	}
}

// streamNamePattern is what a provisioned JetStream stream may be called: a name the
// server takes that is also a single subject token. Compiled at its first use: its
// bounded repetition makes a 60 KB program, which every start paid for in init.
var streamNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`) })

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	o.Check(&c)
	c.IntRange("max_in_flight", o.MaxInFlight, 1, 65536)
	p := o.Provision
	k := func(f string) string { return "provision." + f }
	if p.Enabled && p.Stream == "" {
		c.Add(k("stream"), "required when provision.enabled is true: the name of the JetStream stream to create")
	} else if p.Stream != "" && !streamNamePattern().MatchString(p.Stream) {
		c.Add(k("stream"), "must be 1 to 64 ASCII letters, digits, '_' or '-'; got %s", driveropt.Quote(p.Stream))
	}
	c.OneOf(k("retention"), p.Retention, "limits", "interest", "workqueue")
	c.OneOf(k("storage"), p.Storage, "file", "memory")
	c.IntRange(k("replicas"), p.Replicas, 1, 5)
	c.DurRange(k("duplicate_window"), p.DuplicateWindow, time.Second, 7*24*time.Hour)
	return c.Problems
}

// Summary names the servers, the ways of authenticating and whether the driver
// creates its stream.
func (o Options) Summary() router.Summary {
	s := o.Options.Summary()
	s.Provision = o.Provision.Enabled
	return s
}

// CheckPrefix requires, while provisioning, a prefix ending in '.': the stream created
// captures "<topic_prefix>>".
func (o Options) CheckPrefix(driver, topicPrefix string) string {
	if o.Provision.Enabled && !strings.HasSuffix(topicPrefix, ".") {
		return "must end with '.' when drivers." + driver + ".provision.enabled is true, so that the JetStream stream " +
			"it creates can capture \"<topic_prefix>>\"; got " + driveropt.Quote(topicPrefix)
	}
	return ""
}
