package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

// brokerURL is the test broker's URL: OUTBOXD_TEST_RABBITMQ_URL, or the local guest
// account (testenv.RabbitMQURL).
func brokerURL() string {
	if u := os.Getenv("OUTBOXD_TEST_RABBITMQ_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// requireBroker skips t, saying how to start one, when no RabbitMQ answers (or fails it
// under OUTBOXD_REQUIRE_SERVICES=1).
func requireBroker(t testing.TB) {
	t.Helper()
	testenv.RabbitMQURL(t)
}

// quiet logs nowhere: the library's goroutines may outlive a test.
var quiet = slog.New(slog.DiscardHandler)

func testOptions(url, exchange string) Options {
	o := DefaultOptions()
	o.URL, o.Exchange = url, exchange
	return o
}

// newDriver builds a driver for t and closes it when t ends.
func newDriver(t testing.TB, o Options) *Driver {
	t.Helper()
	d, err := New("test", o, quiet)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// broker is a test's own view of RabbitMQ, as an administrator and a consumer: an
// exchange of its own and queues bound to it, all deleted when the test ends.
type broker struct {
	t        testing.TB
	conn     *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queues   map[string]string // routing key → queue
	mu       sync.Mutex
}

// newBroker connects to the test broker and declares an exchange of kind (topic or
// direct) named outboxd-test-<random>; kind "" declares none and uses the default.
func newBroker(t testing.TB, kind string) *broker {
	t.Helper()
	requireBroker(t)
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	b := &broker{t: t, conn: conn, ch: ch, queues: map[string]string{}}
	if kind != "" {
		b.exchange = "outboxd-test-" + suffix()
		b.declareExchange(b.exchange, kind)
	}
	t.Cleanup(func() {
		if b.exchange != "" {
			_ = b.ch.ExchangeDelete(b.exchange, false, false)
		}
		_ = conn.Close() // deletes the exclusive queues
	})
	return b
}

func (b *broker) declareExchange(name, kind string) {
	b.t.Helper()
	if err := b.ch.ExchangeDeclare(name, kind, false, true, false, false, nil); err != nil {
		b.t.Fatalf("declare exchange %s: %v", name, err)
	}
}

// bind declares a queue of the test's own and binds it to the exchange with key (on the
// default exchange, the queue is named key), so that what is published to key from now
// on waits in it.
func (b *broker) bind(key string) string {
	b.t.Helper()
	name := "outboxd-test-q-" + suffix()
	if b.exchange == "" {
		name = key
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.ch.QueueDeclare(name, false, false, true, false, nil); err != nil {
		b.t.Fatalf("declare queue %s: %v", name, err)
	}
	if b.exchange != "" {
		if err := b.ch.QueueBind(name, key, b.exchange, false, nil); err != nil {
			b.t.Fatalf("bind queue %s to %s with %q: %v", name, b.exchange, key, err)
		}
	}
	b.queues[key] = name
	return name
}

// topic returns a fresh routing key with a queue bound to it.
func (b *broker) topic(t *testing.T) string {
	key := "outboxd.test." + suffix()
	b.bind(key)
	return key
}

// receive consumes n messages from the queue bound to key, failing t if fewer arrive
// within 15 seconds.
func (b *broker) receive(t *testing.T, key string, n int) []routertest.Received {
	t.Helper()
	var out []routertest.Received
	for _, d := range b.deliveries(t, key, n) {
		out = append(out, received(d))
	}
	return out
}

// deliveries consumes n messages from the queue bound to key, as the broker delivered them.
func (b *broker) deliveries(t testing.TB, key string, n int) []amqp.Delivery {
	t.Helper()
	b.mu.Lock()
	queue, ok := b.queues[key]
	b.mu.Unlock()
	if !ok {
		t.Fatalf("no queue is bound to %q", key)
	}
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	defer ch.Close()
	// At most n unacknowledged: what this call does not take stays in the queue.
	if err := ch.Qos(n, 0, false); err != nil {
		t.Fatalf("qos: %v", err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	var out []amqp.Delivery
	timeout := time.After(15 * time.Second)
	for len(out) < n {
		select {
		case d := <-ds:
			if err := d.Ack(false); err != nil {
				t.Fatalf("ack: %v", err)
			}
			out = append(out, d)
		case <-timeout:
			t.Fatalf("queue %s: %d messages arrived, want %d", queue, len(out), n)
		}
	}
	return out
}

// received is a delivery as the conformance suite sees it; the key travels as a header.
func received(d amqp.Delivery) routertest.Received {
	r := routertest.Received{Topic: d.RoutingKey, Payload: d.Body, Headers: map[string]string{}}
	for k, v := range d.Headers {
		s, _ := v.(string)
		r.Headers[k] = s
		if k == router.HeaderKey {
			r.Key = []byte(s)
		}
	}
	return r
}

// refusingURL is an AMQP URL of a local port nobody listens on.
func refusingURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "amqp://guest:guest@" + addr + "/"
}

// numbered builds n messages to topic with payloads "<tag>-0"… and dedup ids of their own.
func numbered(topic string, n int, tag string) []router.Message {
	msgs := make([]router.Message, n)
	run := suffix()
	for i := range msgs {
		msgs[i] = router.Message{
			ID:         int64(i + 1),
			Stream:     "test",
			Topic:      topic,
			Key:        []byte("key-" + strconv.Itoa(i%3)),
			Headers:    map[string]string{"seq": strconv.Itoa(i)},
			Payload:    []byte(tag + "-" + strconv.Itoa(i)),
			RowDedupID: "test-" + run + "-" + strconv.Itoa(i),
		}
	}
	return msgs
}

// proxy forwards TCP connections to the broker, so that a test can cut them or hold
// back what the broker sends, as a network would.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	hold  chan struct{} // while open (not closed), broker-to-client bytes wait
	stall chan struct{} // while open, client-to-broker bytes are not read
	sent  chan struct{} // signalled when client bytes go through while held
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, sent: make(chan struct{}, 1)}
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.release()
	})
	go p.serve()
	return p
}

// url is brokerURL with the proxy's address.
func (p *proxy) url() string {
	u, err := amqp.ParseURI(brokerURL())
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host, u.Port = "127.0.0.1", p.ln.Addr().(*net.TCPAddr).Port
	return u.String()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(s, c, true)
		go p.pipe(c, s, false)
	}
}

func (p *proxy) pipe(to, from net.Conn, fromClient bool) {
	defer to.Close()
	defer from.Close()
	buf := make([]byte, 32<<10)
	for {
		if fromClient {
			p.mu.Lock()
			stall := p.stall
			p.mu.Unlock()
			if stall != nil {
				<-stall
			}
		}
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hold := p.hold
			p.mu.Unlock()
			if hold != nil {
				if fromClient {
					select {
					case p.sent <- struct{}{}:
					default:
					}
				} else {
					<-hold
				}
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holdReplies stops what the broker sends from reaching clients until release.
func (p *proxy) holdReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
}

// stallUploads stops reading what clients send until release, so that their writes
// block once the socket buffers are full, as with a broker that stopped reading.
func (p *proxy) stallUploads() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

func (p *proxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// cut closes every connection made through the proxy so far.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// brokerAddr is the host:port of the test broker.
func brokerAddr(t testing.TB) string {
	u, err := amqp.ParseURI(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}
