// Package kafka publishes outbox messages to Kafka through segmentio/kafka-go.
//
// Invariant: a message is confirmed only when every in-sync replica holds it (acks=all),
// and each message's result is its own. One Publish is one produce request to each
// broker leading a partition it writes to (more only when a partition's share exceeds
// one request's limits, and one more per message when the broker refuses a batch as too
// large); a message the cluster can never take (larger than a produce request may be,
// bound for a topic that does not exist, refused as too large by the broker) fails
// alone and permanently while the rest of its batch is written. Messages with the same
// key always go to the same partition (murmur2, as the Java client does), so messages
// of a key arrive in order, except that one which failed and is published again arrives
// after its successors.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package kafka is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Producer tuning. These are decisions, not settings: see docs/configuration.md for the
// settings and the comments here for why each value was chosen.
const (
	// maxRequestBytes bounds one partition's batch in a produce request (counted as
	// requestSize counts) and therefore one message. It stays 1 KiB under Kafka's
	// default message.max.bytes (1048588) so that record-batch framing never pushes a
	// batch we send over the broker's default limit.
	maxRequestBytes = 1<<20 - 1<<10

	// batchMessages caps the messages of one partition in one produce request; a
	// publish with more for one partition sends them in several requests, one after
	// the other. 1000 messages of 1 KiB already fill maxRequestBytes.
	batchMessages = 1000

	// writeAttempts is the driver's own budget of attempts per partition for an
	// answer that may change (a temporary refusal, a lost connection). The dispatcher
	// retries with backoff and attempt accounting; the driver only rides out a blip,
	// so that an answer comes back well within the write timeout.
	writeAttempts   = 3
	minWriteBackoff = 50 * time.Millisecond
	writeBackoffMax = 500 * time.Millisecond

	// metadataTTL bounds how long the producer's cached view of the cluster may be
	// stale: a topic created while outboxd runs is published to within this, and a
	// broker that was down at first use is retried within it.
	metadataTTL = 2 * time.Second

	// maxDialTimeout bounds connecting (TCP, TLS and SASL) to a broker; a smaller
	// write timeout lowers it to half of that, so an absent broker is reported as
	// unreachable before the write times out.
	maxDialTimeout = 5 * time.Second

	defaultClientID     = "outboxd"
	defaultWriteTimeout = 10 * time.Second
)

// Driver publishes to one Kafka cluster. It is safe for concurrent use.
type Driver struct {
	name         string
	log          *slog.Logger
	addr         net.Addr
	autoCreate   bool
	provision    Provision // create a missing topic when Enabled
	writeTimeout time.Duration
	connect      func() *kafka.Transport // builds a transport with this driver's settings
	transport    *kafka.Transport
	compression  protocol.Attributes
	balancer     kafka.Murmur2Balancer // chooses partitions, as the Java client does

	// mu is held for reading by every Publish and for writing by Close, so Close
	// waits for publishes in flight and none starts on a closed writer.
	mu     sync.RWMutex
	closed bool
}

var _ router.Driver = (*Driver)(nil)

// New builds the driver named name. It does not connect: brokers are dialled on the
// first Publish, so a cluster that is down does not stop outboxd from starting. It
// fails only for configuration it cannot use (an unreadable CA or key pair, an unknown
// SASL mechanism or compression codec).
func New(name string, cfg Options, logger *slog.Logger) (*Driver, error) {
	fail := func(err error) (*Driver, error) { return nil, fmt.Errorf("kafka driver %q: %w", name, err) }
	if len(cfg.Brokers) == 0 {
		return fail(errors.New("brokers: at least one host:port is required"))
	}
	compression, err := codec(cfg.Compression)
	if err != nil {
		return fail(err)
	}
	tlsConfig, err := tlsClient(cfg.TLS)
	if err != nil {
		return fail(err)
	}
	mechanism, err := saslMechanism(cfg.SASL)
	if err != nil {
		return fail(err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	writeTimeout := cfg.WriteTimeout
	if writeTimeout <= 0 {
		writeTimeout = defaultWriteTimeout
	}
	clientID := cfg.ClientID
	if clientID == "" {
		clientID = defaultClientID
	}
	dialTimeout := min(maxDialTimeout, writeTimeout/2)

	d := &Driver{
		name:         name,
		log:          logger.With("driver", name),
		addr:         kafka.TCP(cfg.Brokers...),
		autoCreate:   cfg.AllowAutoTopicCreation,
		provision:    cfg.Provision,
		writeTimeout: writeTimeout,
		compression:  protocol.Attributes(compression) & 7,
	}
	d.connect = func() *kafka.Transport {
		return &kafka.Transport{
			Dial:        (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			DialTimeout: dialTimeout,
			MetadataTTL: metadataTTL,
			ClientID:    clientID,
			TLS:         tlsConfig,
			SASL:        mechanism,
		}
	}
	d.transport = d.connect()
	return d, nil
}

// Close closes the connections. It waits for publishes in flight; a second Close does
// nothing.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.transport.CloseIdleConnections()
	return nil
}

func codec(name string) (kafka.Compression, error) {
	switch name {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("compression: unsupported codec %q; want none, gzip, snappy, lz4 or zstd", name)
}

func tlsClient(c driveropt.TLS) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	return c.Client()
}

func saslMechanism(c SASL) (sasl.Mechanism, error) {
	switch c.Mechanism {
	case "":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: c.Username, Password: c.Password.Reveal()}, nil
	case "scram-sha-256":
		return scram.Mechanism(scram.SHA256, c.Username, c.Password.Reveal())
	case "scram-sha-512":
		return scram.Mechanism(scram.SHA512, c.Username, c.Password.Reveal())
	}
	return nil, fmt.Errorf("sasl.mechanism: unsupported %q; want plain, scram-sha-256 or scram-sha-512", c.Mechanism)
}
