// Package routertest is the conformance suite every broker driver passes: complete and
// ordered batches, per-message errors, cancellation, an unreachable broker and close.
// Each driver's tests call Run with a harness wired to a real (embedded) broker.
//
// Compatibility: public API for driver authors, under the promise stated in package
// router: a driver outside this module can run the suite, and a new case is added only
// for behaviour the router's contract already demands.
package routertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
)

// Received is a message as a consumer read it back from the broker.
type Received struct {
	Topic   string
	Key     []byte
	Headers map[string]string
	Payload []byte
}

// Harness connects the suite to one driver and its broker.
type Harness struct {
	// Driver is the driver under test, connected to a live broker. The suite closes it.
	Driver router.Driver
	// Topic returns a fresh destination the broker accepts, already being consumed,
	// so that everything published to it after the call can be received.
	Topic func(t *testing.T) string
	// Receive returns exactly n messages that arrived on topic, waiting for them up to a
	// deadline and failing t if fewer arrive. Order is arrival order (per partition for
	// Kafka, concatenated).
	Receive func(t *testing.T, topic string, n int) []Received
	// Refused returns a message, meant to be published next to others on topic, that
	// the broker refuses for good (invalid destination, missing topic or stream, too
	// large). Its Topic may differ from topic.
	Refused func(t *testing.T, topic string) router.Message
	// Unreachable returns a driver configured for a broker that is not there.
	Unreachable func(t *testing.T) router.Driver
	// OrderedByKeyOnly says the broker keeps order per key only (Kafka partitions).
	OrderedByKeyOnly bool
}

// Run runs the suite. setup is called once per case and must give a fresh harness.
func Run(t *testing.T, setup func(t *testing.T) *Harness) {
	cases := []struct {
		name string
		run  func(t *testing.T, h *Harness)
	}{
		{"a batch arrives complete, in order, with its keys and headers", batchArrivesInOrder},
		{"a refused message fails alone and permanently while its batch is delivered", refusedFailsAlone},
		{"an ordered publish sends nothing of a key past its refused head", orderedStopsAtRefusedHead},
		{"a cancelled context fails every message and confirms none", cancelledContext},
		{"an unreachable broker is reported as unreachable for every message", unreachableBroker},
		{"publishing after close fails every message and close is idempotent", afterClose},
		{"an empty batch has no results and publishes nothing", emptyBatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := setup(t)
			t.Cleanup(func() { _ = h.Driver.Close() })
			c.run(t, h)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// batch builds n messages on topic with five keys and a numbered payload. Each has a
// dedup id of its own, as a claimed row has, fresh for every batch.
func batch(topic string, n int) []router.Message {
	msgs := make([]router.Message, n)
	run := strconv.FormatUint(rand.Uint64(), 36)
	for i := range msgs {
		msgs[i] = router.Message{
			ID:         int64(1000 + i),
			Stream:     "conformance",
			Topic:      topic,
			Key:        []byte("key-" + strconv.Itoa(i%5)),
			Headers:    map[string]string{"content-type": "text/plain", "seq": strconv.Itoa(i)},
			Payload:    []byte("payload-" + strconv.Itoa(i)),
			RowDedupID: "conformance-" + run + "-" + strconv.Itoa(i),
		}
	}
	return msgs
}

func requireNoErrors(t *testing.T, errs []error, n int) {
	t.Helper()
	if len(errs) != n {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), n)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func batchArrivesInOrder(t *testing.T, h *Harness) {
	topic := h.Topic(t)
	const n = 50
	msgs := batch(topic, n)
	requireNoErrors(t, h.Driver.Publish(ctxFor(t), msgs), n)

	got := h.Receive(t, topic, n)
	lastSeq := map[string]int{} // per key, or one sequence for all when the broker orders totally
	seen := map[int]bool{}
	for _, r := range got {
		seq, err := strconv.Atoi(r.Headers["seq"])
		if err != nil {
			t.Fatalf("received a message without its seq header: %+v", r)
		}
		want := msgs[seq]
		if string(r.Payload) != string(want.Payload) || string(r.Key) != string(want.Key) || r.Topic != topic {
			t.Fatalf("message %d arrived as topic=%q key=%q payload=%q", seq, r.Topic, r.Key, r.Payload)
		}
		if r.Headers["content-type"] != "text/plain" {
			t.Fatalf("message %d lost a producer header: %v", seq, r.Headers)
		}
		if r.Headers[router.HeaderID] != strconv.FormatInt(want.ID, 10) || r.Headers[router.HeaderStream] != "conformance" ||
			r.Headers[router.HeaderMessageID] != want.RowDedupID {
			t.Fatalf("message %d lacks the outbox headers: %v", seq, r.Headers)
		}
		order := ""
		if h.OrderedByKeyOnly {
			order = string(r.Key)
		}
		if last, ok := lastSeq[order]; ok && seq <= last {
			t.Fatalf("message %d arrived after message %d (order key %q)", seq, last, order)
		}
		lastSeq[order] = seq
		if seen[seq] {
			t.Fatalf("message %d arrived twice", seq)
		}
		seen[seq] = true
	}
}

func refusedFailsAlone(t *testing.T, h *Harness) {
	topic := h.Topic(t)
	msgs := batch(topic, 10)
	const bad = 4
	refused := h.Refused(t, topic)
	refused.Headers = map[string]string{"seq": strconv.Itoa(bad)}
	msgs[bad] = refused

	errs := h.Driver.Publish(ctxFor(t), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		switch {
		case i == bad && err == nil:
			t.Fatalf("the refused message was reported as published")
		case i == bad && router.KindOf(err) != router.KindPermanent:
			t.Fatalf("the refused message failed as %s, want permanent: %v", router.KindOf(err), err)
		case i != bad && err != nil:
			t.Fatalf("message %d failed beside the refused one: %v", i, err)
		}
	}
	if errs[bad].Error() == "" {
		t.Fatal("the permanent error has no reason")
	}
	for _, r := range h.Receive(t, topic, len(msgs)-1) {
		if r.Headers["seq"] == strconv.Itoa(bad) {
			t.Fatal("the refused message arrived")
		}
	}
}

// orderedStopsAtRefusedHead publishes, through PublishOrdered, a batch whose message 4
// the broker refuses (its destination is missing) and whose message 9 shares that
// message's key but goes to a destination that takes it. Whatever the broker says of
// message 4, message 9 must not be published ahead of it: it is held back unsent, and
// the other keys are delivered.
func orderedStopsAtRefusedHead(t *testing.T, h *Harness) {
	topic := h.Topic(t)
	msgs := batch(topic, 10)
	const head, behind = 4, 9
	refused := h.Refused(t, topic)
	refused.ID = msgs[head].ID
	refused.Key = msgs[head].Key
	refused.Headers = map[string]string{"seq": strconv.Itoa(head)}
	msgs[head] = refused
	if string(msgs[behind].Key) != string(refused.Key) {
		t.Fatalf("suite: message %d has key %q, not its head's %q", behind, msgs[behind].Key, refused.Key)
	}

	rt, err := router.New([]router.Route{{Stream: "conformance", DriverName: "under-test", Driver: h.Driver}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("conformance")
	if err != nil {
		t.Fatal(err)
	}
	errs := pub.PublishOrdered(ctxFor(t), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("PublishOrdered returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		switch {
		case i == head && router.KindOf(err) != router.KindPermanent:
			t.Fatalf("the refused head: %v (%s), want permanent", err, router.KindOf(err))
		case i == behind && err == nil:
			t.Fatalf("message %d of key %q was published past its refused head", i, msgs[i].Key)
		case i == behind && router.KindOf(err) != router.KindHeldBack:
			t.Fatalf("message %d behind the refused head: %v (%s), want held back", i, err, router.KindOf(err))
		case i != head && i != behind && err != nil:
			t.Fatalf("message %d of another key failed: %v", i, err)
		}
	}
	for _, r := range h.Receive(t, topic, len(msgs)-2) {
		if s := r.Headers["seq"]; s == strconv.Itoa(head) || s == strconv.Itoa(behind) {
			t.Fatalf("message %s arrived: %v", s, r)
		}
	}
}

func cancelledContext(t *testing.T, h *Harness) {
	topic := h.Topic(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := batch(topic, 5)
	errs := h.Driver.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if err == nil {
			t.Fatalf("message %d reported as published under a cancelled context", i)
		}
		if k := router.KindOf(err); k == router.KindPermanent {
			t.Fatalf("message %d failed permanently because the context was cancelled: %v", i, err)
		}
	}
	// The driver still works afterwards.
	requireNoErrors(t, h.Driver.Publish(ctxFor(t), batch(topic, 1)), 1)
}

func unreachableBroker(t *testing.T, h *Harness) {
	d := h.Unreachable(t)
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	errs := d.Publish(ctx, batch("conformance.unreachable", 3))
	if len(errs) != 3 {
		t.Fatalf("Publish returned %d results for 3 messages", len(errs))
	}
	for i, err := range errs {
		if k := router.KindOf(err); err == nil || k != router.KindUnreachable {
			t.Fatalf("message %d to an absent broker: kind %s, error %v; want unreachable", i, k, err)
		}
	}
	if elapsed := time.Since(start); ctx.Err() != nil {
		t.Fatalf("an absent broker took the whole context (%v) to report", elapsed)
	}
}

func afterClose(t *testing.T, h *Harness) {
	topic := h.Topic(t)
	if err := h.Driver.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := h.Driver.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	errs := h.Driver.Publish(ctxFor(t), batch(topic, 3))
	if len(errs) != 3 {
		t.Fatalf("Publish returned %d results for 3 messages", len(errs))
	}
	for i, err := range errs {
		if !errors.Is(err, router.ErrClosed) || router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d published after close: %v (%s); want unreachable router.ErrClosed", i, err, router.KindOf(err))
		}
	}
}

func emptyBatch(t *testing.T, h *Harness) {
	if errs := h.Driver.Publish(ctxFor(t), nil); len(errs) != 0 {
		t.Fatalf("empty batch returned %d results", len(errs))
	}
	topic := h.Topic(t)
	requireNoErrors(t, h.Driver.Publish(ctxFor(t), batch(topic, 1)), 1)
	if got := h.Receive(t, topic, 1); len(got) != 1 || string(got[0].Payload) != "payload-0" {
		t.Fatalf("after an empty batch, received %v", got)
	}
}

// String renders a received message for failure messages.
func (r Received) String() string {
	return fmt.Sprintf("{topic=%s key=%q payload=%q headers=%v}", r.Topic, r.Key, r.Payload, r.Headers)
}
