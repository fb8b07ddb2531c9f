package bench

// The database and Kafka alone (--alone): the claimer process's publish to the bench's
// Kafka topic between each held claim and its commit, through franz-go, the Go client
// that asks least of its caller: one synchronous produce of the claim's records, acks
// from all in-sync replicas as the kafka driver asks, no idempotence, no compression,
// no linger. No outboxd driver, router or pipeline runs.

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// kafkaAlone publishes claimed batches with one franz-go client. Each claimer goroutine
// (worker) reuses its records and their headers, only their values rewritten.
type kafkaAlone struct {
	cl      *kgo.Client
	workers []kafkaAloneWorker
}

// kafkaAloneWorker is one claimer goroutine's records, with a pointer to each as the
// client takes them, and the bytes of their ids.
type kafkaAloneWorker struct {
	recs []kgo.Record
	ptrs []*kgo.Record
	ids  [][]byte
}

// newKafkaAlone connects to brokers for workers goroutines claiming batches of at most
// batch rows.
func newKafkaAlone(brokers []string, workers, batch int) (*kafkaAlone, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(benchKafkaTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return nil, fmt.Errorf("franz-go client for the Kafka topic: %w", err)
	}
	k := &kafkaAlone{cl: cl, workers: make([]kafkaAloneWorker, workers)}
	for w := range k.workers {
		k.workers[w] = kafkaAloneWorker{recs: make([]kgo.Record, batch), ptrs: make([]*kgo.Record, batch), ids: make([][]byte, batch)}
	}
	return k, nil
}

func (k *kafkaAlone) close() { k.cl.Close() }

// publish produces c's rows as worker and returns once every one is acknowledged, or
// with the first refusal. claimAck never claims more than the batch size the records
// were made for.
func (k *kafkaAlone) publish(ctx context.Context, worker int, c store.Claim) error {
	w := &k.workers[worker]
	for i := range c.Messages {
		r := &c.Messages[i]
		dedup := r.MessageID
		if dedup == "" {
			dedup = r.DedupID
		}
		w.ids[i] = strconv.AppendInt(w.ids[i][:0], r.ID, 10)
		headers := w.recs[i].Headers[:0]
		headers = append(headers,
			kgo.RecordHeader{Key: router.HeaderID, Value: w.ids[i]},
			kgo.RecordHeader{Key: router.HeaderStream, Value: []byte(r.Stream)},
			kgo.RecordHeader{Key: router.HeaderMessageID, Value: []byte(dedup)})
		// A record is the client's until its produce returns: then it is written afresh.
		w.recs[i] = kgo.Record{Key: r.Key, Value: r.Payload, Headers: headers}
		w.ptrs[i] = &w.recs[i]
	}
	return k.cl.ProduceSync(ctx, w.ptrs[:len(c.Messages)]...).FirstErr()
}
