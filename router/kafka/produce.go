package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"
)

// The driver produces with its own requests rather than kafka-go's Writer. The Writer
// sends one produce request per partition, each from a goroutine of its own, and
// allocates a batch of its configured size for every partition a call touches; a
// publish to eight partitions cost eight requests, eight answers and eight
// hand-overs. Here a publish sends, to each broker leading a partition it writes to,
// one request holding every such partition's records, and waits for its answer
// (docs/benchmarks.md has the figures). What the Writer decided is kept: partitions
// chosen by murmur2 over the topic's partition count, as the Java client does; acks
// from every in-sync replica; three attempts per partition for an answer that may
// change, with a growing pause between them.

// maxProduceBytes bounds the records of one produce request, all partitions together;
// a publish with more for one broker sends several requests, one after the other. It
// stays far under Kafka's default socket.request.max.bytes (100 MiB).
const maxProduceBytes = 16 << 20

// partBatch is the share of a publish bound for one partition: message indexes in the
// call's order, and how many of them a request has carried and the broker confirmed.
type partBatch struct {
	topic     string
	partition int32
	idx       []int
	next      int  // idx[:next] are confirmed
	end       int  // idx[next:end] are in the request in flight
	stopped   bool // a request for it failed: the rest waits for the next attempt
}

// produceOnce sends the messages at idx once, to their partitions' leaders as layout
// names them (read from the producer's metadata when nil), and sets their outcomes; it
// returns the indexes whose failure may pass if they are sent again (a temporary
// refusal, a connection lost), each partition's in the call's order.
func (c *publishCall) produceOnce(idx []int, layout map[string]topicState) []int {
	if layout == nil {
		topics := make([]string, 0, 1)
		for _, i := range idx {
			if t := c.msgs[i].Topic; !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
		var err error
		if layout, err = c.d.topicMeta(c.wctx, c.d.transport, topics, false); err != nil {
			for _, i := range idx {
				c.out[i] = c.unsent(c.msgs[i].Topic, err)
			}
			return nil
		}
	}
	if c.parts == nil {
		c.assign(idx, layout)
	}

	var again []int
	byLeader := map[int32][]*partBatch{}
	var order []int32 // leaders in the order first met, so that requests go out in a stable order
	batches := map[topicPartition]*partBatch{}
	for _, i := range idx {
		topic, p := c.msgs[i].Topic, c.parts[i]
		leaders := layout[topic].leaders
		if p < 0 || int(p) >= len(leaders) || leaders[p] < 0 {
			why := fmt.Errorf("partition %d has no leader now: %w", p, kafka.LeaderNotAvailable)
			if p < 0 {
				why = fmt.Errorf("the cluster's metadata lists no partition of the topic: %w", kafka.LeaderNotAvailable)
			}
			c.out[i] = classify(publishError(topic, why))
			again = append(again, i)
			continue
		}
		key := topicPartition{topic, p}
		b := batches[key]
		if b == nil {
			b = &partBatch{topic: topic, partition: p}
			batches[key] = b
			leader := leaders[p]
			if _, ok := byLeader[leader]; !ok {
				order = append(order, leader)
			}
			byLeader[leader] = append(byLeader[leader], b)
		}
		b.idx = append(b.idx, i)
	}

	// One goroutine per further leader; the first is served here. Each writes only the
	// outcomes of its own partitions' messages.
	retry := make([][]int, len(order))
	var wg sync.WaitGroup
	for j := 1; j < len(order); j++ {
		wg.Go(func() { retry[j] = c.toLeader(byLeader[order[j]]) })
	}
	if len(order) > 0 {
		retry[0] = c.toLeader(byLeader[order[0]])
	}
	wg.Wait()
	for _, r := range retry {
		again = append(again, r...)
	}
	return again
}

type topicPartition struct {
	topic     string
	partition int32
}

// assign chooses each message's partition, once per publish, so that a message sent
// again goes where it went first.
func (c *publishCall) assign(idx []int, layout map[string]topicState) {
	c.parts = make([]int32, len(c.msgs))
	lists := map[string][]int{}
	for _, i := range idx {
		topic := c.msgs[i].Topic
		n := len(layout[topic].leaders)
		if n == 0 {
			c.parts[i] = -1
			continue
		}
		list, ok := lists[topic]
		if !ok {
			list = make([]int, n)
			for p := range list {
				list[p] = p
			}
			lists[topic] = list
		}
		c.parts[i] = int32(c.d.balancer.Balance(kafka.Message{Key: c.msgs[i].Key}, list...))
	}
}

// toLeader sends parts, all led by one broker, in as few requests as the limits allow,
// one after the other, and returns the indexes worth sending again.
func (c *publishCall) toLeader(parts []*partBatch) []int {
	var again []int
	fail := func(b *partBatch, err error, retry bool) {
		for _, i := range b.idx[b.next:] {
			c.out[i] = err
		}
		if retry {
			again = append(again, b.idx[b.next:]...)
		}
		b.stopped = true
	}
	for {
		req := &produce.Request{Acks: int16(kafka.RequireAll), Timeout: int32(min(c.d.writeTimeout.Milliseconds(), math.MaxInt32))}
		var sent []*partBatch
		total := 0
		at := time.Now()
		for _, b := range parts {
			if b.stopped || b.next == len(b.idx) {
				continue
			}
			b.end = b.next
			size := 0
			for b.end < len(b.idx) && b.end-b.next < batchMessages {
				s := requestSize(&c.batch[b.idx[b.end]])
				if b.end > b.next && (size+s > maxRequestBytes || total+size+s > maxProduceBytes) {
					break
				}
				size += s
				b.end++
			}
			if len(sent) > 0 && total+size > maxProduceBytes {
				break
			}
			total += size
			sent = append(sent, b)
			req.Topics = addPartition(req.Topics, b.topic, produce.RequestPartition{
				Partition: b.partition,
				RecordSet: protocol.RecordSet{
					Attributes: c.d.compression,
					Records:    &records{batch: c.batch, idx: b.idx[b.next:b.end], at: at},
				},
			})
		}
		if len(sent) == 0 {
			return again
		}
		res, err := c.d.transport.RoundTrip(c.wctx, c.d.addr, req)
		if err != nil {
			retry := c.wctx.Err() == nil && sendAgain(err)
			for _, b := range sent {
				fail(b, c.failure(b.topic, err), retry)
			}
			continue
		}
		codes, ok := answers(res)
		for _, b := range sent {
			code, answered := codes[topicPartition{b.topic, b.partition}]
			switch {
			case !ok || !answered:
				fail(b, classify(publishError(b.topic, fmt.Errorf("the broker's answer left out partition %d", b.partition))), true)
			case code != 0:
				fail(b, classify(publishError(b.topic, code)), code.Temporary())
			default:
				for _, i := range b.idx[b.next:b.end] {
					c.out[i] = nil
				}
				b.next = b.end
			}
		}
	}
}

// addPartition appends p to topic's entry of topics, adding the entry if it is new.
func addPartition(topics []produce.RequestTopic, topic string, p produce.RequestPartition) []produce.RequestTopic {
	for i := range topics {
		if topics[i].Topic == topic {
			topics[i].Partitions = append(topics[i].Partitions, p)
			return topics
		}
	}
	return append(topics, produce.RequestTopic{Topic: topic, Partitions: []produce.RequestPartition{p}})
}

// answers reads a produce response into each partition's error code.
func answers(res protocol.Message) (map[topicPartition]kafka.Error, bool) {
	r, ok := res.(*produce.Response)
	if !ok {
		return nil, false
	}
	codes := map[topicPartition]kafka.Error{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			codes[topicPartition{t.Topic, p.Partition}] = kafka.Error(p.ErrorCode)
		}
	}
	return codes, true
}

// sendAgain reports whether a request that failed with err is worth another attempt:
// the broker said so, or the connection broke before its answer.
func sendAgain(err error) bool {
	var temp interface{ Temporary() bool }
	if errors.As(err, &temp) && temp.Temporary() {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || lostConnection(err)
}

// writeBackoff is the pause before attempt n+1.
func writeBackoff(n int) time.Duration {
	return min(time.Duration(n*n)*minWriteBackoff, writeBackoffMax)
}

// pause waits d, or less if the write's context ends first; it reports whether it
// waited the whole time.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// records hands one partition's share of a request to kafka-go's encoder, record by
// record, without copying keys or values; the encoder reads each record whole before
// it asks for the next, so one record and two readers serve them all.
type records struct {
	batch      []kafka.Message
	idx        []int
	at         time.Time
	rec        protocol.Record
	key, value bytesReader
}

func (r *records) ReadRecord() (*protocol.Record, error) {
	if len(r.idx) == 0 {
		return nil, io.EOF
	}
	m := &r.batch[r.idx[0]]
	r.idx = r.idx[1:]
	r.rec = protocol.Record{Time: r.at, Headers: m.Headers}
	if m.Key != nil {
		r.key.Reset(m.Key)
		r.rec.Key = &r.key
	}
	if m.Value != nil {
		r.value.Reset(m.Value)
		r.rec.Value = &r.value
	}
	return &r.rec, nil
}

// bytesReader is a byte slice as protocol.Bytes.
type bytesReader struct{ bytes.Reader }

func (*bytesReader) Close() error { return nil }
