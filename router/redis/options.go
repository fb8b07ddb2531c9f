package redis

import (
	"math"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "redis"

// Defaults the driver falls back to when its options leave them zero.
const (
	DefaultPublishTimeout = 5 * time.Second
	// DefaultMaxPayloadBytes is Redis's default proto-max-bulk-len (512 MiB), the
	// largest single argument a server takes: a longer one makes it reply with a
	// protocol error and close the connection, failing every other command pipelined
	// on it. The driver refuses such a message before sending anything.
	DefaultMaxPayloadBytes = 512 << 20
)

// maxPoolSize bounds pool_size: far above what a dispatcher's pipelines can use at
// once (streams × concurrency), low enough to catch a typo.
const maxPoolSize = 10000

// Options configure the Redis Streams driver. One driver talks to one Redis server
// (a primary; not a cluster) at Addr, in database DB.
type Options struct {
	Addr     string           `yaml:"addr"`
	Username string           `yaml:"username"`
	Password driveropt.Secret `yaml:"password"`
	DB       int              `yaml:"db"`
	TLS      driveropt.TLS    `yaml:"tls"`
	// PublishTimeout bounds one Publish: the pipeline's round trip, and the dial when
	// there is no connection to reuse.
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	// PoolSize caps the connections to the server; 0 takes go-redis's default (10 per
	// CPU).
	PoolSize int `yaml:"pool_size"`
	// MaxPayloadBytes bounds the payload, and every other value of an entry, that
	// the driver sends; a message above it fails permanently before anything is sent.
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	// MaxLen trims each stream to about (Approximate) or exactly this many entries as
	// every entry is added; 0 never trims.
	MaxLen      int  `yaml:"maxlen"`
	Approximate bool `yaml:"approximate"`
}

// DefaultOptions returns the documented defaults; there is no default server.
func DefaultOptions() Options {
	return Options{
		PublishTimeout:  DefaultPublishTimeout,
		MaxPayloadBytes: DefaultMaxPayloadBytes,
		Approximate:     true,
	}
}

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	if c.Required("addr", o.Addr) {
		if msg := driveropt.HostPortProblem(o.Addr, false); msg != "" {
			c.Add("addr", "want host:port, got %s: %s", driveropt.Quote(o.Addr), msg)
		}
	}
	c.Secret("password", o.Password)
	if o.Username != "" && o.Password == "" {
		c.Add("password", "required when username is set (a password alone authenticates as the default user)")
	}
	c.IntRange("db", o.DB, 0, math.MaxInt32)
	o.TLS.Check(&c, "tls")
	c.Positive("publish_timeout", o.PublishTimeout)
	c.IntRange("pool_size", o.PoolSize, 0, maxPoolSize)
	c.IntRange("max_payload_bytes", o.MaxPayloadBytes, 1, math.MaxInt32)
	if o.MaxLen < 0 {
		c.Add("maxlen", "must not be negative (0 never trims), got %d", o.MaxLen)
	}
	return c.Problems
}

// Summary names the server and how the driver authenticates.
func (o Options) Summary() router.Summary {
	s := router.Summary{TLS: o.TLS.Enabled}
	if o.Addr != "" {
		s.Servers = []string{o.Addr}
	}
	switch {
	case o.Username != "":
		s.Auth = []string{"user/password"}
	case o.Password != "":
		s.Auth = []string{"password"}
	}
	return s
}
