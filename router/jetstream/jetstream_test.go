package jetstream_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/natsconn"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	routertest.Run(t, conformanceHarness)
}

// conformanceHarness wires the suites to a fresh broker (or destination) of its own.
func conformanceHarness(t *testing.T) *routertest.Harness {
	b := newBroker(t)
	return &routertest.Harness{
		Driver:  newDriver(t, b.srv.URL(), 0),
		Topic:   b.topic,
		Receive: b.receive,
		Refused: func(t *testing.T, topic string) router.Message {
			return router.Message{ID: 1, Stream: "conformance", Topic: "nostream." + topic, Payload: []byte("refused")}
		},
		Unreachable: func(t *testing.T) router.Driver { return newDriver(t, absentServerURL(t), 0) },
	}
}

func TestASubjectNoStreamCapturesIsPermanentAndSaysSo(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	errs := d.Publish(ctx(t), messages("orphan.subject", 1, 8))
	if k := router.KindOf(errs[0]); k != router.KindPermanent {
		t.Fatalf("kind %s (%v), want permanent", k, errs[0])
	}
	if want := "no JetStream stream captures subject orphan.subject"; !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("error %q does not say %q", errs[0], want)
	}
}

func TestPublishingTheSameOutboxIDTwiceStoresOneMessageAndCountsADuplicate(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topic(t)

	msg := messages(topic, 1, 8)
	for i := range 2 {
		if err := d.Publish(ctx(t), msg)[0]; err != nil {
			t.Fatalf("publish %d: %v", i+1, err)
		}
	}
	if n := b.stored(t, topic); n != 1 {
		t.Fatalf("the stream holds %d messages, want 1", n)
	}
	if n := d.Duplicates(); n != 1 {
		t.Fatalf("Duplicates() = %d, want 1", n)
	}
}

func TestAMessageIDGivenByTheProducerIsTheDeduplicationID(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topic(t)

	msgs := messages(topic, 2, 8) // two outbox rows, one producer message id
	msgs[0].MessageID, msgs[1].MessageID = "order-42", "order-42"
	requireNoErrors(t, d.Publish(ctx(t), msgs))
	if n := b.stored(t, topic); n != 1 {
		t.Fatalf("the stream holds %d messages, want 1", n)
	}
	got := b.receive(t, topic, 1)
	if got[0].Headers[jetstream.MsgIDHeader] != "order-42" || got[0].Headers[router.HeaderID] != "1" {
		t.Fatalf("stored headers %v", got[0].Headers)
	}
}

func TestAStoppedServerIsUnreachableAtOnceAndTheSameDriverPublishesAfterItRestarts(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const timeout = 10 * time.Second
	d := newDriverWith(t, jsdriver.Options{Options: natsconn.Options{URL: b.srv.URL(), PublishTimeout: timeout}})
	topic := b.topic(t)
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 5, 8)))

	b.srv.Stop()
	start := time.Now()
	msgs := messages(topic, 5, 8)
	for i := range msgs {
		msgs[i].ID += 100
	}
	for i, err := range d.Publish(ctx(t), msgs) {
		if k := router.KindOf(err); err == nil || k != router.KindUnreachable {
			t.Fatalf("message %d with the server stopped: kind %s (%v), want unreachable", i, k, err)
		}
	}
	if elapsed := time.Since(start); elapsed > timeout/4 {
		t.Fatalf("reporting a stopped server took %v (publish timeout %v)", elapsed, timeout)
	}

	b.srv.Start()
	jsdriver.WaitConnected(t, jsdriver.Conn(d))
	requireNoErrors(t, d.Publish(ctx(t), msgs))
	jsdriver.WaitConnected(t, b.nc)
	if n := b.stored(t, topic); n != 10 {
		t.Fatalf("the stream holds %d messages after the restart, want 10", n)
	}
}

func TestADriverCreatedWhileTheServerIsDownPublishesOnceItStarts(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	topic := b.topic(t)
	b.srv.Stop()

	d := newDriver(t, b.srv.URL(), 0) // fails the test if New fails
	for i, err := range d.Publish(ctx(t), messages(topic, 2, 8)) {
		if k := router.KindOf(err); k != router.KindUnreachable {
			t.Fatalf("message %d before the server started: kind %s (%v), want unreachable", i, k, err)
		}
	}

	b.srv.Start()
	jsdriver.WaitConnected(t, jsdriver.Conn(d))
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 3, 8)))
	jsdriver.WaitConnected(t, b.nc)
	if n := b.stored(t, topic); n != 3 {
		t.Fatalf("the stream holds %d messages, want 3", n)
	}
}

func TestABatchOfAThousandPublishesThroughAWindowOfEight(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 8)
	topic := b.topic(t)

	const n = 1000
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, n, 64)))
	got := b.receive(t, topic, n)
	for i, r := range got {
		if r.Headers[router.HeaderID] != strconv.Itoa(i+1) {
			t.Fatalf("message %d arrived as id %s", i, r.Headers[router.HeaderID])
		}
	}
}

func TestConcurrentBatchesShareTheWindow(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 8)
	topic := b.topic(t)

	const workers, per = 4, 250
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			msgs := messages(topic, per, 64)
			for i := range msgs {
				msgs[i].ID = int64(w*per + i + 1)
			}
			for i, err := range d.Publish(ctx(t), msgs) {
				if err != nil {
					t.Errorf("worker %d message %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	if n := b.stored(t, topic); n != workers*per {
		t.Fatalf("the stream holds %d messages, want %d", n, workers*per)
	}
}

func TestAnOversizePayloadIsPermanentAndTheRestOfItsBatchIsDelivered(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topic(t)

	msgs := messages(topic, 5, 16)
	const big = 3
	msgs[big].Payload = bytes.Repeat([]byte("x"), 1<<20+1) // the default max_payload is 1 MiB
	requireOnlyFailure(t, d.Publish(ctx(t), msgs), big, router.KindPermanent)
	for _, r := range b.receive(t, topic, len(msgs)-1) {
		if len(r.Payload) > 16 {
			t.Fatal("the oversize message was stored")
		}
	}
	if n := b.stored(t, topic); n != uint64(len(msgs)-1) {
		t.Fatalf("the stream holds %d messages, want %d", n, len(msgs)-1)
	}
}

func TestAMessageOverTheStreamsMaximumSizeIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topicWith(t, jetstream.StreamConfig{MaxMsgSize: 1024})

	msgs := messages(topic, 3, 16)
	msgs[1].Payload = bytes.Repeat([]byte("x"), 2048) // under max_payload, over the stream's limit
	requireOnlyFailure(t, d.Publish(ctx(t), msgs), 1, router.KindPermanent)
}

func TestAStreamAtItsMessageLimitIsRetryable(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topicWith(t, jetstream.StreamConfig{MaxMsgs: 2, Discard: jetstream.DiscardNew})

	errs := d.Publish(ctx(t), messages(topic, 3, 16))
	requireOnlyFailure(t, errs, 2, router.KindRetryable)
	if !strings.Contains(errs[2].Error(), "maximum messages exceeded") {
		t.Fatalf("the error does not name the limit: %v", errs[2])
	}
}

func TestAFailedProducerExpectationIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topic(t)

	msgs := messages(topic, 3, 16)
	msgs[0].Headers[jetstream.ExpectedStreamHeader] = "SOME_OTHER_STREAM"
	requireOnlyFailure(t, d.Publish(ctx(t), msgs), 0, router.KindPermanent)
}

// requireOnlyFailure checks that message bad, and only it, failed with kind want.
func requireOnlyFailure(t *testing.T, errs []error, bad int, want router.Kind) {
	t.Helper()
	for i, err := range errs {
		switch {
		case i == bad && router.KindOf(err) != want:
			t.Fatalf("message %d: kind %s (%v), want %s", i, router.KindOf(err), err, want)
		case i == bad && err == nil:
			t.Fatalf("message %d was reported as stored", i)
		case i != bad && err != nil:
			t.Fatalf("message %d failed beside message %d: %v", i, bad, err)
		}
	}
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// broker is an embedded server with the test's own connection, creating one stream and
// one ordered consumer per topic.
type broker struct {
	srv       *testenv.NATSServer
	nc        *nats.Conn
	js        jetstream.JetStream
	seq       atomic.Int64
	mu        sync.Mutex
	consumers map[string]jetstream.Consumer
	streams   map[string]string
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	srv := testenv.NewNATS(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("test connection: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &broker{srv: srv, nc: nc, js: js, consumers: map[string]jetstream.Consumer{}, streams: map[string]string{}}
}

func (b *broker) topic(t *testing.T) string { return b.topicWith(t, jetstream.StreamConfig{}) }

// topicWith creates a stream capturing a fresh subject (file storage, default duplicate
// window, limits from cfg) and an ordered consumer on it.
func (b *broker) topicWith(t *testing.T, cfg jetstream.StreamConfig) string {
	t.Helper()
	n := b.seq.Add(1)
	subject := "conformance.t" + strconv.FormatInt(n, 10)
	cfg.Name = "T" + strconv.FormatInt(n, 10)
	cfg.Subjects = []string{subject}
	cfg.Storage = jetstream.FileStorage
	s, err := b.js.CreateStream(ctx(t), cfg)
	if err != nil {
		t.Fatalf("create stream for %s: %v", subject, err)
	}
	c, err := s.OrderedConsumer(ctx(t), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("consumer for %s: %v", subject, err)
	}
	b.mu.Lock()
	b.consumers[subject], b.streams[subject] = c, cfg.Name
	b.mu.Unlock()
	return subject
}

func (b *broker) receive(t *testing.T, topic string, n int) []routertest.Received {
	t.Helper()
	b.mu.Lock()
	c := b.consumers[topic]
	b.mu.Unlock()
	if c == nil {
		t.Fatalf("receive: %s is not a topic of this harness", topic)
	}
	deadline := time.Now().Add(10 * time.Second)
	out := make([]routertest.Received, 0, n)
	for len(out) < n && time.Now().Before(deadline) {
		batch, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatalf("fetch from %s: %v", topic, err)
		}
		for m := range batch.Messages() {
			out = append(out, received(m))
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("fetch from %s: %v", topic, err)
		}
	}
	if len(out) < n {
		t.Fatalf("received %d of %d messages on %s", len(out), n, topic)
	}
	return out
}

// stored is how many messages the stream capturing topic holds.
func (b *broker) stored(t *testing.T, topic string) uint64 {
	t.Helper()
	b.mu.Lock()
	name := b.streams[topic]
	b.mu.Unlock()
	s, err := b.js.Stream(ctx(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info.State.Msgs
}

func received(m jetstream.Msg) routertest.Received {
	r := routertest.Received{Topic: m.Subject(), Payload: m.Data(), Headers: map[string]string{}}
	for k, v := range m.Headers() {
		if len(v) > 0 {
			r.Headers[k] = v[0]
		}
	}
	if k, ok := m.Headers()[router.HeaderKey]; ok && len(k) > 0 {
		r.Key = []byte(k[0])
	}
	return r
}

// newDriver connects a driver to url; inFlight 0 takes the default window.
func newDriver(t *testing.T, url string, inFlight int) *jsdriver.Driver {
	t.Helper()
	return newDriverWith(t, jsdriver.Options{Options: natsconn.Options{URL: url, PublishTimeout: 5 * time.Second}, MaxInFlight: inFlight})
}

func newDriverWith(t *testing.T, cfg jsdriver.Options) *jsdriver.Driver {
	t.Helper()
	d, err := jsdriver.New("test", cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// absentServerURL is a local address where nothing listens: a port taken and freed.
func absentServerURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "nats://" + addr
}

func messages(topic string, n, size int) []router.Message {
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{
			ID: int64(i + 1), Stream: "test", Topic: topic,
			Headers: map[string]string{"seq": strconv.Itoa(i)},
			Payload: bytes.Repeat([]byte{'a' + byte(i%26)}, size),
		}
	}
	return msgs
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
