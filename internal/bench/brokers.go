package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/router"
)

// benchNATS is the NATS server the nats and jetstream drivers publish to: embedded
// (with JetStream, file storage) unless --nats-url names one.
type benchNATS struct {
	stop   func() // stops the embedded server; nil for a server of the user's
	dir    string
	url    string
	nc     *natsgo.Conn
	stream jetstream.Stream // nil unless the jetstream driver is measured
}

func startBenchNATS(ctx context.Context, url string, withJetStream bool) (*benchNATS, error) {
	n := &benchNATS{url: url}
	if url == "" {
		dir, err := os.MkdirTemp("", "outboxd-bench-nats-")
		if err != nil {
			return nil, err
		}
		n.dir = dir
		if n.url, n.stop, err = StartEmbeddedNATS(dir); err != nil {
			n.close()
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	var err error
	if n.nc, err = natsgo.Connect(n.url, natsgo.Timeout(10*time.Second)); err != nil {
		n.close()
		return nil, fmt.Errorf("bench: connect to NATS: %w", err)
	}
	if !withJetStream {
		return n, nil
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		n.close()
		return nil, err
	}
	// A stream left by an earlier run holds messages whose Outbox-Id, which the tally
	// counts, this run's rows reuse (ids start at 1 again): delete it.
	if err := js.DeleteStream(ctx, benchJetStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		n.close()
		return nil, fmt.Errorf("bench: delete the JetStream stream %s left by an earlier run: %w", benchJetStream, err)
	}
	n.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: benchJetStream, Subjects: []string{benchPrefix + ">"},
		Storage: jetstream.FileStorage})
	if err != nil {
		n.close()
		return nil, fmt.Errorf("bench: create the JetStream stream %s for subjects %s> (the jetstream driver needs JetStream enabled on the server): %w",
			benchJetStream, benchPrefix, err)
	}
	return n, nil
}

func (n *benchNATS) close() {
	if n.nc != nil {
		if n.stream != nil && n.stop == nil {
			// On the user's server, leave nothing behind.
			if js, err := jetstream.New(n.nc); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = js.DeleteStream(ctx, benchJetStream)
				cancel()
			}
		}
		n.nc.Close()
	}
	if n.stop != nil {
		n.stop()
	}
	if n.dir != "" {
		_ = os.RemoveAll(n.dir)
	}
}

// natsCounter subscribes to the bench subjects on a connection of its own before the
// drain starts: core NATS keeps nothing for a subscriber that comes later.
type natsCounter struct {
	nc    *natsgo.Conn
	sub   *natsgo.Subscription
	tally *tally
}

func (n *benchNATS) subscribe() (arrivalCounter, error) {
	nc, err := natsgo.Connect(n.url, natsgo.Timeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to NATS: %w", err)
	}
	c := &natsCounter{nc: nc, tally: newTally()}
	c.sub, err = nc.Subscribe(benchPrefix+">", func(m *natsgo.Msg) { c.tally.add(m.Header.Get(router.HeaderID)) })
	if err == nil {
		err = c.sub.SetPendingLimits(-1, -1) // never drop a message on our side
	}
	if err == nil {
		err = nc.Flush() // the server knows the subscription before anything is published
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: subscribe to %s>: %w", benchPrefix, err)
	}
	return c, nil
}

func (c *natsCounter) countedBy() string {
	return "a core NATS subscriber (distinct Outbox-Id headers)"
}

func (c *natsCounter) close() { c.nc.Close() }

// count waits until every id arrived or, once the server has answered a flush (so it
// has sent us everything published before), until nothing more arrives for a second.
func (c *natsCounter) count(ctx context.Context, ids []int64, _ *dispatcherProcess) (int64, int64, error) {
	if err := c.nc.FlushTimeout(10 * time.Second); err != nil {
		return 0, 0, err
	}
	last, quiet := c.tally.count(), time.Now()
	for time.Since(quiet) < time.Second {
		if arrived, _ := c.tally.against(ids); arrived == int64(len(ids)) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if now := c.tally.count(); now != last {
			last, quiet = now, time.Now()
		}
	}
	arrived, dups := c.tally.against(ids)
	return arrived, dups, nil
}

// jetStreamCounter empties the bench stream before the drain and reads it back after.
type jetStreamCounter struct{ stream jetstream.Stream }

func (n *benchNATS) purge(ctx context.Context) (arrivalCounter, error) {
	if err := n.stream.Purge(ctx); err != nil {
		return nil, fmt.Errorf("bench: purge the JetStream stream %s: %w", benchJetStream, err)
	}
	return jetStreamCounter{stream: n.stream}, nil
}

func (jetStreamCounter) countedBy() string {
	return "the JetStream stream, read back (distinct Outbox-Id headers)"
}

func (jetStreamCounter) close() {}

func (j jetStreamCounter) count(ctx context.Context, ids []int64, _ *dispatcherProcess) (int64, int64, error) {
	info, err := j.stream.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	stored := int64(info.State.Msgs)
	t := newTally()
	if stored > 0 {
		cons, err := j.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return 0, 0, err
		}
		done := make(chan struct{})
		var once sync.Once
		consumed, err := cons.Consume(func(m jetstream.Msg) {
			t.add(m.Headers().Get(router.HeaderID))
			if t.count() >= stored {
				once.Do(func() { close(done) })
			}
		})
		if err != nil {
			return 0, 0, err
		}
		select {
		case <-done:
		case <-ctx.Done():
		case <-time.After(2 * time.Minute):
		}
		consumed.Stop()
		if t.count() < stored {
			return 0, 0, fmt.Errorf("read back %d of the %d messages the stream holds", t.count(), stored)
		}
	}
	arrived, dups := t.against(ids)
	return arrived, dups, nil
}

// benchKafka is the Kafka cluster the kafka driver publishes to: an embedded
// Kafka-protocol broker (kfake) unless --kafka-brokers names one.
type benchKafka struct {
	stop    func() // stops the embedded broker; nil for a cluster of the user's
	brokers []string
	cl      *kgo.Client
}

// benchKafkaTopic is where the bench's messages go: the stream prefix and row topic.
const benchKafkaTopic = benchPrefix + benchTopic

func startBenchKafka(ctx context.Context, brokers []string) (*benchKafka, error) {
	k := &benchKafka{brokers: brokers}
	if len(brokers) == 0 {
		var err error
		if k.brokers, k.stop, err = startEmbeddedKafka(benchPartitions, benchKafkaTopic); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	var err error
	if k.cl, err = kgo.NewClient(kgo.SeedBrokers(k.brokers...)); err != nil {
		k.close()
		return nil, fmt.Errorf("bench: Kafka client: %w", err)
	}
	if _, err := k.partitions(ctx); err == nil || k.stop != nil {
		return k, err
	}
	// A cluster of the user's without the topic: create it.
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = benchKafkaTopic, benchPartitions, -1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, k.cl)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		k.close()
		return nil, fmt.Errorf("bench: create the Kafka topic %s (%d partitions) on %v: %w; create it yourself or let the bench's user create topics",
			benchKafkaTopic, benchPartitions, k.brokers, err)
	}
	return k, nil
}

func (k *benchKafka) close() {
	if k.cl != nil {
		k.cl.Close()
	}
	if k.stop != nil {
		k.stop()
	}
}

// partitions lists the bench topic's partitions.
func (k *benchKafka) partitions(ctx context.Context) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(benchKafkaTopic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, fmt.Errorf("bench: Kafka metadata: %w", err)
	}
	var out []int32
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			return nil, fmt.Errorf("bench: Kafka topic %s: %w", benchKafkaTopic, err)
		}
		for _, p := range rt.Partitions {
			out = append(out, p.Partition)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: Kafka topic %s has no partitions", benchKafkaTopic)
	}
	return out, nil
}

// ends returns each partition's end offset (the offset the next record will get).
func (k *benchKafka) ends(ctx context.Context) (map[int32]int64, error) {
	parts, err := k.partitions(ctx)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = benchKafkaTopic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // latest
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, fmt.Errorf("bench: Kafka offsets: %w", err)
	}
	out := map[int32]int64{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, fmt.Errorf("bench: Kafka offsets of %s/%d: %w", benchKafkaTopic, rp.Partition, err)
			}
			out[rp.Partition] = rp.Offset
		}
	}
	return out, nil
}

// kafkaCounter notes the partitions' end offsets before the drain and reads every
// record after them once it is over.
type kafkaCounter struct {
	k     *benchKafka
	start map[int32]int64
}

func (k *benchKafka) mark(ctx context.Context) (arrivalCounter, error) {
	start, err := k.ends(ctx)
	if err != nil {
		return nil, err
	}
	return kafkaCounter{k: k, start: start}, nil
}

func (kafkaCounter) countedBy() string {
	return "the Kafka topic's partitions, read back from the offsets before the drain (distinct Outbox-Id headers)"
}

func (kafkaCounter) close() {}

func (c kafkaCounter) count(ctx context.Context, ids []int64, _ *dispatcherProcess) (int64, int64, error) {
	end, err := c.k.ends(ctx)
	if err != nil {
		return 0, 0, err
	}
	offsets := map[int32]kgo.Offset{}
	var want int64
	for p, e := range end {
		s := c.start[p]
		if e > s {
			offsets[p] = kgo.NewOffset().At(s)
			want += e - s
		}
	}
	t := newTally()
	if want > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.k.brokers...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{benchKafkaTopic: offsets}))
		if err != nil {
			return 0, 0, err
		}
		defer cl.Close()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var read int64
		for read < want {
			fetches := cl.PollFetches(rctx)
			if err := rctx.Err(); err != nil {
				return 0, 0, fmt.Errorf("read back %d of %d records: %w", read, want, err)
			}
			var ferr error
			fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
			if ferr != nil {
				return 0, 0, ferr
			}
			fetches.EachRecord(func(r *kgo.Record) {
				if r.Offset >= end[r.Partition] {
					return // published after the drain ended: not ours
				}
				read++
				id := ""
				for _, h := range r.Headers {
					if h.Key == router.HeaderID {
						id = string(h.Value)
					}
				}
				t.add(id)
			})
		}
	}
	arrived, dups := t.against(ids)
	return arrived, dups, nil
}
