package kafka

import (
	"strings"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "kafka"

// Options configure the Kafka driver.
type Options struct {
	Brokers                []string      `yaml:"brokers"`
	ClientID               string        `yaml:"client_id"`
	Compression            string        `yaml:"compression"`
	AllowAutoTopicCreation bool          `yaml:"allow_auto_topic_creation"`
	WriteTimeout           time.Duration `yaml:"write_timeout"`
	SASL                   SASL          `yaml:"sasl"`
	// Provision creates a topic the first time a message is bound for it and the
	// cluster does not have it; off by default, because topics are usually owned by
	// whoever runs the broker.
	Provision Provision     `yaml:"provision"`
	TLS       driveropt.TLS `yaml:"tls"`
}

// SASL configures Kafka authentication.
type SASL struct {
	Mechanism string           `yaml:"mechanism"`
	Username  string           `yaml:"username"`
	Password  driveropt.Secret `yaml:"password"`
}

// Provision says whether and how the driver creates a missing topic.
type Provision struct {
	Enabled           bool `yaml:"enabled"`
	Partitions        int  `yaml:"partitions"`
	ReplicationFactor int  `yaml:"replication_factor"`
}

// DefaultOptions returns the documented defaults; there is no default broker.
func DefaultOptions() Options {
	return Options{
		ClientID:     defaultClientID,
		Compression:  "none",
		WriteTimeout: defaultWriteTimeout,
		Provision:    Provision{Partitions: 1, ReplicationFactor: 1},
	}
}

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	o.TLS.Check(&c, "tls")
	c.IntRange("provision.partitions", o.Provision.Partitions, 1, 10000)
	c.IntRange("provision.replication_factor", o.Provision.ReplicationFactor, 1, 32)
	if len(o.Brokers) == 0 {
		c.Add("brokers", "required: at least one host:port")
	}
	for i, b := range o.Brokers {
		if msg := driveropt.HostPortProblem(b, false); msg != "" {
			c.Add("brokers", "item %d: want host:port, got %s: %s", i+1, driveropt.Quote(b), msg)
		}
	}
	c.OneOf("compression", o.Compression, "none", "gzip", "snappy", "lz4", "zstd")
	c.Positive("write_timeout", o.WriteTimeout)
	c.OneOf("sasl.mechanism", o.SASL.Mechanism, "", "plain", "scram-sha-256", "scram-sha-512")
	c.Secret("sasl.password", o.SASL.Password)
	if o.SASL.Mechanism != "" {
		if o.SASL.Username == "" {
			c.Add("sasl.username", "required when sasl.mechanism is set")
		}
		if o.SASL.Password == "" {
			c.Add("sasl.password", "required when sasl.mechanism is set")
		}
	} else if o.SASL.Username != "" || o.SASL.Password != "" {
		c.Add("sasl.mechanism", "required when sasl.username or sasl.password is set")
	}
	return c.Problems
}

// Summary names the brokers, the SASL mechanism and whether topics are created.
func (o Options) Summary() router.Summary {
	s := router.Summary{Servers: o.Brokers, TLS: o.TLS.Enabled, Provision: o.Provision.Enabled}
	if o.SASL.Mechanism != "" {
		s.Auth = append(s.Auth, "sasl/"+strings.ToLower(o.SASL.Mechanism))
	}
	return s
}
