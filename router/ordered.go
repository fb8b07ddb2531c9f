package router

import (
	"context"
	"fmt"
)

// Checker is implemented by drivers that can tell before sending anything that the
// broker or client will refuse a message (an invalid subject or header, a message too
// large for any request). Check returns the classified error Publish would give it,
// or nil when nothing is known against it.
type Checker interface {
	Check(m *Message) error
}

// OrderedChunkBytes bounds the messages one driver call of PublishOrdered carries. A
// Kafka producer splits a partition's messages into several requests above about 1 MiB
// and sends those concurrently, so that a later request of a key could land while an
// earlier one is retried; below this bound each partition's share of a call is one
// request, appended whole or not at all.
const OrderedChunkBytes = 512 << 10

// orderedChunkMessages bounds the messages of one driver call likewise (the Kafka
// driver's batch is 1000 messages per partition request).
const orderedChunkMessages = 1000

type keyOrderKey struct{}

// KeyOrdered reports whether ctx is a PublishOrdered call's: a driver that re-sends
// messages one by one on its own (the Kafka driver, after a request refused as too
// large) then holds back the rest of a key once one of its messages fails.
func KeyOrdered(ctx context.Context) bool { return ctx.Value(keyOrderKey{}) != nil }

// PublishOrdered publishes msgs, which must be in id order, so that no message is sent
// after an earlier message of its key failed: that one is answered with its error and
// every later message of the key is held back (KindHeldBack) without being sent. As
// Publish, it applies the route's prefix and leaves msgs unmodified.
// Messages without a key are not ordered. Known refusals (Checker, and messages the
// stream's format refuses) are found before anything is sent; the rest go in as few
// driver calls as the size bounds allow, each call publishing its messages in order
// through the middlewares, and a key that fails in one call is held back in the next.
// Within one call the broker's own order applies: a key's messages go in order on one
// connection (NATS, JetStream) or in one request per partition (Kafka). That order holds per destination only, so a key's messages in one call all
// go to one destination: a message of a key bound elsewhere than the key's earlier
// messages in the call starts the next call. It returns one error per message, in order.
func (p *Publisher) PublishOrdered(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	msgs, bad := p.destined(msgs)
	ctx = context.WithValue(ctx, keyOrderKey{}, true)
	stopped := map[string]int64{} // key → id of its message that did not go through
	checker := p.checker
	holdBack := func(i int) bool {
		if msgs[i].Key == nil {
			return false
		}
		if id, ok := stopped[string(msgs[i].Key)]; ok {
			errs[i] = HeldBack(fmt.Errorf("message %d waits for message %d of key %q, which did not go through", msgs[i].ID, id, msgs[i].Key))
			return true
		}
		return false
	}
	stop := func(i int) {
		if k := msgs[i].Key; k != nil {
			if _, ok := stopped[string(k)]; !ok {
				stopped[string(k)] = msgs[i].ID
			}
		}
	}
	var chunk []int
	var batch []Message
	bytes := 0
	dest := map[string]string{} // key → the destination of its messages in chunk
	flush := func() {
		clear(dest)
		if len(chunk) == 0 {
			return
		}
		batch = batch[:0]
		for _, i := range chunk {
			batch = append(batch, msgs[i])
		}
		res := p.send(ctx, batch)
		for j, i := range chunk {
			errs[i] = res[j]
			if res[j] != nil {
				stop(i)
			}
		}
		chunk, bytes = chunk[:0], 0
	}
	for i := range msgs {
		if holdBack(i) {
			continue
		}
		if bad != nil && bad[i] != nil {
			errs[i] = bad[i]
			stop(i)
			continue
		}
		if checker != nil {
			if err := checker.Check(&msgs[i]); err != nil {
				errs[i] = err
				stop(i)
				continue
			}
		}
		size := len(msgs[i].Payload) + len(msgs[i].Key)
		for k, v := range msgs[i].Headers {
			size += len(k) + len(v)
		}
		if len(chunk) > 0 && (bytes+size > OrderedChunkBytes || len(chunk) == orderedChunkMessages || movesOn(dest, &msgs[i])) {
			flush()
			if holdBack(i) {
				continue
			}
		}
		if msgs[i].Key != nil {
			dest[string(msgs[i].Key)] = msgs[i].Topic
		}
		chunk = append(chunk, i)
		bytes += size
	}
	flush()
	return errs
}

// movesOn says whether m's key already has messages in the chunk (dest) bound for
// another destination. Two destinations are two unordered streams of answers: a Kafka
// driver finds one topic missing and still writes the other, and each topic's
// partition is its own produce request; a JetStream server refuses a subject no stream
// captures after the next message of the key, on another subject, was already stored.
// Only the driver's answer for the first tells whether the second may go.
func movesOn(dest map[string]string, m *Message) bool {
	if m.Key == nil {
		return false
	}
	topic, ok := dest[string(m.Key)]
	return ok && topic != m.Topic
}
