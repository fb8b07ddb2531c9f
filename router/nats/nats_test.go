package nats_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	natsdriver "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/natsconn"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	routertest.Run(t, conformanceHarness)
}

// conformanceHarness wires the suites to a fresh broker (or destination) of its own.
func conformanceHarness(t *testing.T) *routertest.Harness {
	srv := testenv.NewNATS(t)
	c := newConsumer(t, srv.URL())
	return &routertest.Harness{
		Driver:  newDriver(t, srv.URL()),
		Topic:   c.topic,
		Receive: c.receive,
		Refused: func(t *testing.T, topic string) router.Message {
			// The library sends wildcard subjects; the driver must refuse them itself.
			return router.Message{ID: 1, Stream: "conformance", Topic: topic + ".*", Payload: []byte("refused")}
		},
		Unreachable: func(t *testing.T) router.Driver { return newDriver(t, absentServerURL(t)) },
	}
}

func TestAnOversizePayloadIsPermanentAndTheRestOfItsBatchIsDelivered(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	c := newConsumer(t, srv.URL())
	d := newDriver(t, srv.URL())
	topic := c.topic(t)

	msgs := messages(topic, 5, 16)
	const big = 2
	msgs[big].Payload = bytes.Repeat([]byte("x"), 1<<20+1) // the default max_payload is 1 MiB
	errs := d.Publish(ctx(t), msgs)
	for i, err := range errs {
		if i == big {
			if k := router.KindOf(err); k != router.KindPermanent {
				t.Fatalf("oversize message: kind %s (%v), want permanent", k, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("message %d beside the oversize one: %v", i, err)
		}
	}
	for _, r := range c.receive(t, topic, len(msgs)-1) {
		if len(r.Payload) > 16 {
			t.Fatal("the oversize message arrived")
		}
	}
}

// Publish builds every message in one reused header map: what one message carried must
// not reach the next, and a message refused for a header fails alone.
func TestAHeaderNATSWouldAlterFailsItsMessageAloneAndNoHeaderCarriesOver(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	c := newConsumer(t, srv.URL())
	d := newDriver(t, srv.URL())
	topic := c.topic(t)

	msgs := messages(topic, 6, 8)
	msgs[0].Headers["only-first"] = "1"
	msgs[0].Key = []byte("k0")
	const bad = 2
	msgs[bad].Headers["trace"] = "a\r\nb"
	msgs[bad+1].Key = []byte("k3")
	errs := d.Publish(ctx(t), msgs)
	for i, err := range errs {
		switch {
		case i == bad && router.KindOf(err) != router.KindPermanent:
			t.Fatalf("message with a CR LF header: kind %s (%v), want permanent", router.KindOf(err), err)
		case i == bad && !errors.Is(err, nats.ErrBadHeaderMsg):
			t.Fatalf("message with a CR LF header: %v, want nats.ErrBadHeaderMsg", err)
		case i != bad && err != nil:
			t.Fatalf("message %d beside the refused one: %v", i, err)
		}
	}
	for _, r := range c.receive(t, topic, len(msgs)-1) {
		seq, _ := strconv.Atoi(r.Headers["seq"])
		if seq == bad {
			t.Fatalf("the refused message arrived: %v", r.Headers)
		}
		want := maps.Clone(msgs[seq].Headers)
		want[router.HeaderID], want[router.HeaderStream] = strconv.Itoa(seq+1), "test"
		want[router.HeaderMessageID] = msgs[seq].DedupID()
		if msgs[seq].Key != nil {
			want[router.HeaderKey] = string(msgs[seq].Key)
		}
		if len(r.Headers) != len(want) {
			t.Fatalf("message %d arrived with headers %v, want %v", seq, r.Headers, want)
		}
		for k, v := range want {
			if r.Headers[k] != v {
				t.Fatalf("message %d: header %s = %q, want %q (all: %v)", seq, k, r.Headers[k], v, r.Headers)
			}
		}
	}
}

func TestADriverCreatedWhileTheServerIsDownPublishesOnceItStarts(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	url := srv.URL()
	srv.Stop()

	d, err := natsdriver.New("late", natsdriver.Options{Options: natsconn.Options{URL: url, PublishTimeout: 5 * time.Second}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New with the server down: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	for i, err := range d.Publish(ctx(t), messages("late.x", 2, 8)) {
		if k := router.KindOf(err); k != router.KindUnreachable {
			t.Fatalf("message %d while the server is down: kind %s (%v), want unreachable", i, k, err)
		}
	}

	srv.Start()
	c := newConsumer(t, url)
	topic := c.topic(t)
	natsdriver.WaitConnected(t, natsdriver.Conn(d))
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 3, 8)))
	c.receive(t, topic, 3)
}

func TestAStoppedServerIsUnreachableAtOnceAndTheSameDriverPublishesAfterItRestarts(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	const timeout = 10 * time.Second
	d, err := natsdriver.New("restart", natsdriver.Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: timeout}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	requireNoErrors(t, d.Publish(ctx(t), messages("restart.x", 5, 8)))

	srv.Stop()
	start := time.Now()
	for i, err := range d.Publish(ctx(t), messages("restart.x", 5, 8)) {
		if k := router.KindOf(err); err == nil || k != router.KindUnreachable {
			t.Fatalf("message %d with the server stopped: kind %s (%v), want unreachable", i, k, err)
		}
	}
	if elapsed := time.Since(start); elapsed > timeout/4 {
		t.Fatalf("reporting a stopped server took %v (publish timeout %v)", elapsed, timeout)
	}

	srv.Start()
	c := newConsumer(t, srv.URL())
	topic := c.topic(t)
	natsdriver.WaitConnected(t, natsdriver.Conn(d))
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 5, 8)))
	c.receive(t, topic, 5)
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func TestPublishingConcurrentlyOnOneDriverDeliversEveryBatch(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	c := newConsumer(t, srv.URL())
	d := newDriver(t, srv.URL())
	topic := c.topic(t)

	const workers, per = 4, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			msgs := messages(topic, per, 8)
			for i := range msgs {
				msgs[i].ID = int64(w*per + i)
			}
			for i, err := range d.Publish(ctx(t), msgs) {
				if err != nil {
					t.Errorf("worker %d message %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range c.receive(t, topic, workers*per) {
		seen[r.Headers[router.HeaderID]] = true
	}
	if len(seen) != workers*per {
		t.Fatalf("received %d distinct ids, want %d", len(seen), workers*per)
	}
}

func TestTheClientNameNamesTheDriver(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	newDriver(t, srv.URL())
	conns, err := srv.Server().Connz(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns.Conns {
		if c.Name == "outboxd/test" {
			return
		}
	}
	t.Fatalf("no connection named outboxd/test among %d", len(conns.Conns))
}

// consumer reads what the driver publishes, on its own connection.
type consumer struct {
	nc   *nats.Conn
	mu   sync.Mutex
	subs map[string]*nats.Subscription
	seq  atomic.Int64
}

func newConsumer(t *testing.T, url string) *consumer {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("consumer connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return &consumer{nc: nc, subs: map[string]*nats.Subscription{}}
}

// topic subscribes to a fresh subject and returns once the server has the subscription.
func (c *consumer) topic(t *testing.T) string {
	t.Helper()
	subject := "conformance.t" + strconv.FormatInt(c.seq.Add(1), 10)
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("flush subscription: %v", err)
	}
	c.mu.Lock()
	c.subs[subject] = sub
	c.mu.Unlock()
	return subject
}

func (c *consumer) receive(t *testing.T, topic string, n int) []routertest.Received {
	t.Helper()
	c.mu.Lock()
	sub := c.subs[topic]
	c.mu.Unlock()
	if sub == nil {
		t.Fatalf("receive: %s is not a topic of this harness", topic)
	}
	deadline := time.Now().Add(10 * time.Second)
	out := make([]routertest.Received, 0, n)
	for len(out) < n {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("received %d of %d messages on %s: %v", len(out), n, topic, err)
		}
		out = append(out, received(m))
	}
	return out
}

func received(m *nats.Msg) routertest.Received {
	r := routertest.Received{Topic: m.Subject, Payload: m.Data, Headers: map[string]string{}}
	for k, v := range m.Header {
		if len(v) > 0 {
			r.Headers[k] = v[0]
		}
	}
	if k, ok := m.Header[router.HeaderKey]; ok && len(k) > 0 {
		r.Key = []byte(k[0])
	}
	return r
}

func newDriver(t *testing.T, url string) *natsdriver.Driver {
	t.Helper()
	d, err := natsdriver.New("test", natsdriver.Options{Options: natsconn.Options{URL: url, PublishTimeout: 5 * time.Second}}, slog.New(slog.DiscardHandler))
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
