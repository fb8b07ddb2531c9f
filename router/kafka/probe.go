package kafka

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/router"
)

var _ router.Prober = (*Driver)(nil)

// Probe reports whether the cluster has topic (asked afresh, never from the producer's
// cache, and never creating it). An empty topic asks only whether the cluster answers.
func (d *Driver) Probe(ctx context.Context, topic string) error {
	tr := d.connect()
	defer tr.CloseIdleConnections()
	var topics []string
	if topic != "" {
		topics = []string{topic}
	}
	codes, err := d.topicMeta(ctx, tr, topics, false)
	if err != nil || topic == "" {
		return err
	}
	switch code := codes[topic].code; code {
	case 0:
		return nil
	case kafka.UnknownTopicOrPartition:
		return &router.NoDestinationError{Reason: fmt.Sprintf("topic %q does not exist", topic)}
	default:
		return fmt.Errorf("topic %q: %w", topic, code)
	}
}
