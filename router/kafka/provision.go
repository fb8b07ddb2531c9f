package kafka

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/segmentio/kafka-go"
)

// createTopics creates topics with the driver's provision settings and yields each
// topic with nil once it exists (created now, or by someone else meanwhile) or with
// why it could not be created. Used only when provisioning is on, for topics the
// cluster said it does not have.
func (d *Driver) createTopics(ctx context.Context, transport *kafka.Transport, topics []string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if len(topics) == 0 {
			return
		}
		req := &kafka.CreateTopicsRequest{Addr: d.addr}
		for _, t := range topics {
			req.Topics = append(req.Topics, kafka.TopicConfig{
				Topic: t, NumPartitions: d.provision.Partitions, ReplicationFactor: d.provision.ReplicationFactor,
			})
		}
		client := &kafka.Client{Addr: d.addr, Transport: transport}
		res, err := client.CreateTopics(ctx, req)
		for _, t := range topics {
			var e error
			switch {
			case err != nil:
				e = fmt.Errorf("create the missing topic (provision.enabled): %w", err)
			case res.Errors[t] == nil, errors.Is(res.Errors[t], kafka.TopicAlreadyExists):
				d.log.Info("created a missing topic (provision.enabled)", "topic", t,
					"partitions", d.provision.Partitions, "replication_factor", d.provision.ReplicationFactor)
			default:
				e = fmt.Errorf("create the missing topic (provision.enabled) with %d partitions and replication factor %d: %w",
					d.provision.Partitions, d.provision.ReplicationFactor, res.Errors[t])
			}
			if !yield(t, e) {
				return
			}
		}
	}
}
