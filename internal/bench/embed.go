//go:build !noembed

package bench

import (
	"errors"
	"fmt"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded reports whether this build carries the embedded brokers (see the package
// doc: the noembed build tag leaves them out).
const Embedded = true

// StartEmbeddedNATS starts a NATS server with JetStream, storing in dir, on a random
// loopback port; stop shuts it down and waits until it has.
func StartEmbeddedNATS(dir string) (url string, stop func(), err error) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true, MaxPayload: embeddedMaxPayload})
	if err != nil {
		return "", nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	go srv.Start()
	stop = func() { srv.Shutdown(); srv.WaitForShutdown() }
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return "", nil, errors.New("embedded NATS did not start within 10s")
	}
	return srv.ClientURL(), stop, nil
}

// embeddedMaxPayload is the embedded NATS server's max_payload: 8 MiB rather than the
// server's 1 MB default, so that bench --payloads 1MiB measures the driver, not the limit.
const embeddedMaxPayload = 8 << 20

// startEmbeddedKafka starts a one-broker Kafka-protocol cluster (kfake) holding topic
// with its partitions.
func startEmbeddedKafka(partitions int32, topic string) (brokers []string, stop func(), err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		return nil, nil, fmt.Errorf("start the embedded Kafka-protocol broker: %w", err)
	}
	return c.ListenAddrs(), c.Close, nil
}
