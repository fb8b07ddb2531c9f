//go:build noembed

package bench

import "fmt"

// Embedded reports whether this build carries the embedded brokers: not with the
// noembed build tag.
const Embedded = false

// StartEmbeddedNATS fails: this build has no embedded NATS server.
func StartEmbeddedNATS(string) (string, func(), error) {
	return "", nil, fmt.Errorf("%w: name a NATS server with --nats-url", ErrNotEmbedded)
}

func startEmbeddedKafka(int32, string) ([]string, func(), error) {
	return nil, nil, fmt.Errorf("%w: name Kafka brokers with --kafka-brokers", ErrNotEmbedded)
}
