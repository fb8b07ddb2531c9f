// Package kafka publishes outbox messages to Kafka through segmentio/kafka-go.
//
// Invariant: a message is confirmed only when every in-sync replica holds it (acks=all),
// and each message's result is its own. One Publish is one WriteMessages call (and one
// more per message when the broker refuses a request as too large); a message
// the cluster can never take (larger than a produce request may be, bound for a topic that
// does not exist, refused as too large by the broker) fails alone and permanently while
// the rest of its batch is written. Messages with the same key always go to the same
// partition (murmur2, as the Java client does), so messages of a key arrive in order,
// except that one which failed and is published again arrives after its successors.
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
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Writer tuning. These are decisions, not settings: see docs/configuration.md for the
// settings and the comments here for why each value was chosen.
const (
	// maxRequestBytes bounds one produce request (kafka-go's BatchBytes, counted its
	// way) and therefore one message. It stays 1 KiB under Kafka's default
	// message.max.bytes (1048588) so that record-batch framing never pushes a request
	// the writer accepts over the broker's default limit.
	maxRequestBytes = 1<<20 - 1<<10

	// batchMessages caps the messages of one produce request per partition; a claim
	// with more for one partition goes in several requests. 1000 messages of 1 KiB
	// already fill maxRequestBytes. kafka-go allocates a slice of its BatchSize's
	// capacity for every partition batch, so a publish of 100 messages to 8 partitions
	// allocated 1.2 MB with it (76 % of a Kafka drain's allocations, a quarter of its
	// CPU in the allocator and the collector). smallBatchMessages is therefore the
	// batch size of a second writer, which serves every Publish of at most that many
	// messages (a default claim is 100): one call still fits one request per
	// partition, with an eighth of the allocation. docs/benchmarks.md has the figures.
	batchMessages      = 1000
	smallBatchMessages = 128

	// batchLinger is how long a partition batch that is not full waits for messages
	// from other calls. kafka-go's default (1 s) made every synchronous write take a
	// second. It can be tiny because kafka-go adds all of one call's messages for a
	// partition under one lock, so an expired linger cannot split them: one Publish
	// stays one produce request per partition (a test holds this).
	batchLinger = time.Microsecond

	// writeAttempts is kafka-go's own retry budget per batch. The dispatcher retries
	// with backoff and attempt accounting; the writer only rides out a blip, so that
	// an answer comes back well within the write timeout.
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
	// writer takes every Publish of at most smallBatchMessages messages; large, built
	// at the first larger one, takes those. Both share transport.
	writer    *kafka.Writer
	newWriter func(batchSize int) *kafka.Writer
	largeOnce sync.Once
	large     *kafka.Writer

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
	d.newWriter = func(batchSize int) *kafka.Writer {
		return &kafka.Writer{
			Addr:                   d.addr,
			Balancer:               &kafka.Murmur2Balancer{},
			MaxAttempts:            writeAttempts,
			WriteBackoffMin:        minWriteBackoff,
			WriteBackoffMax:        writeBackoffMax,
			BatchSize:              batchSize,
			BatchBytes:             maxRequestBytes,
			BatchTimeout:           batchLinger,
			ReadTimeout:            writeTimeout,
			WriteTimeout:           writeTimeout,
			RequiredAcks:           kafka.RequireAll,
			Compression:            compression,
			Transport:              d.transport,
			AllowAutoTopicCreation: cfg.AllowAutoTopicCreation,
			Completion:             acknowledge,
			// Every failure is returned to the caller, who logs it; kafka-go's per-attempt
			// lines are detail for debugging.
			ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
				d.log.Debug("kafka-go: " + fmt.Sprintf(format, args...))
			}),
		}
	}
	d.writer = d.newWriter(smallBatchMessages)
	return d, nil
}

// Close flushes and closes the writer, then the connections. It waits for publishes
// in flight; a second Close does nothing.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.writer.Close()
	if d.large != nil {
		err = errors.Join(err, d.large.Close())
	}
	d.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close kafka driver %q: %w", d.name, err)
	}
	return nil
}

// writerFor is the writer of a Publish of n messages.
func (d *Driver) writerFor(n int) *kafka.Writer {
	if n <= smallBatchMessages {
		return d.writer
	}
	d.largeOnce.Do(func() { d.large = d.newWriter(batchMessages) })
	return d.large
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
