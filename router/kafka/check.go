package kafka

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/router"
)

var _ router.Checker = (*Driver)(nil)

// Check reports what Publish would refuse of m before anything is sent: no topic, a
// topic name Kafka cannot have, or a message larger than one produce request may be.
// Whether the topic exists is learnt only from the broker, when publishing.
func (d *Driver) Check(m *router.Message) error {
	if m.Topic == "" {
		return router.Permanent(errors.New("publish: the message has no topic"))
	}
	var err error
	if badTopic(m.Topic, &err) {
		return err
	}
	km := message(m, nil, nil)
	if size := requestSize(&km); size > maxRequestBytes {
		return router.Permanent(publishError(m.Topic, fmt.Errorf(
			"the message takes %d bytes (key %d, value %d, headers %d) and one produce request may take %d: %w",
			size, len(km.Key), len(km.Value), headerBytes(&km), maxRequestBytes, kafka.MessageSizeTooLarge)))
	}
	return nil
}
