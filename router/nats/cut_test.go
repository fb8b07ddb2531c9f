package nats_test

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	natsdriver "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/natsconn"
)

func TestAConnectionLostDuringTheFlushIsUnreachableAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	p := newCutProxy(t, strings.TrimPrefix(srv.URL(), "nats://"))
	// Long, so that reporting well before it proves the cut was noticed, not timed out,
	// however slow a loaded machine publishes the batch.
	const timeout = 60 * time.Second
	d, err := natsdriver.New("cut", natsdriver.Options{Options: natsconn.Options{URL: p.url(), PublishTimeout: timeout}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	c := newConsumer(t, srv.URL())
	topic := c.topic(t)
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 3, 8)))

	// The next batch is swallowed, and the connection cut when its flush's PING passes:
	// the client believes it published, then loses the connection while awaiting the PONG.
	p.cutAtNextPing()
	start := time.Now()
	for i, err := range d.Publish(ctx(t), messages(topic, 3, 8)) {
		if k := router.KindOf(err); err == nil || k != router.KindUnreachable {
			t.Fatalf("message %d of the lost batch: kind %s (%v), want unreachable", i, k, err)
		}
	}
	if elapsed := time.Since(start); elapsed > timeout/3 {
		t.Fatalf("the lost connection took %v to report (publish timeout %v)", elapsed, timeout)
	}

	natsdriver.WaitConnected(t, natsdriver.Conn(d))
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 3, 8)))
	if got := c.receive(t, topic, 6); len(got) != 6 {
		t.Fatalf("received %d messages", len(got))
	}
}

func TestAConnectionLostInTheMiddleOfABatchFailsItAsUnreachableAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	p := newCutProxy(t, strings.TrimPrefix(srv.URL(), "nats://"))
	// Long, so that reporting well before it proves the cut was noticed, not timed out,
	// however slow a loaded machine publishes the batch.
	const timeout = 60 * time.Second
	d, err := natsdriver.New("cut", natsdriver.Options{Options: natsconn.Options{URL: p.url(), PublishTimeout: timeout}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	// The connection is cut by the first bytes of the batch: the client's own writes
	// fail while it still publishes the rest, and it starts reconnecting mid-batch.
	p.cutAtNextWrite()
	start := time.Now()
	errs := d.Publish(ctx(t), messages("cut.batch", 4000, 1024))
	for i, err := range errs {
		if k := router.KindOf(err); err == nil || k != router.KindUnreachable {
			t.Fatalf("message %d of the cut batch: kind %s (%v), want unreachable", i, k, err)
		}
	}
	if elapsed := time.Since(start); elapsed > timeout/3 {
		t.Fatalf("the cut took %v to report (publish timeout %v)", elapsed, timeout)
	}
}

// cutProxy forwards TCP connections to a server. Once told, it swallows what clients
// send until a PING goes by (or any byte), then closes every connection it holds.
type cutProxy struct {
	l       net.Listener
	to      string
	armed   atomic.Bool
	anyByte atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, to: to}
	t.Cleanup(func() { _ = l.Close(); p.closeAll() })
	go p.serve()
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.l.Addr().String() }

func (p *cutProxy) cutAtNextPing() { p.armed.Store(true) }

func (p *cutProxy) cutAtNextWrite() {
	p.anyByte.Store(true)
	p.armed.Store(true)
}

func (p *cutProxy) serve() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(client, server) }()
		go p.upstream(client, server)
	}
}

// upstream copies client bytes to the server unless armed.
func (p *cutProxy) upstream(client, server net.Conn) {
	buf := make([]byte, 32*1024)
	var tail []byte // the end of the previous read, for a PING split across reads
	for {
		n, err := client.Read(buf)
		if err != nil {
			_ = server.Close()
			return
		}
		if !p.armed.Load() {
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
			continue
		}
		seen := append(tail, buf[:n]...)
		if p.anyByte.Load() || bytes.Contains(seen, []byte("PING\r\n")) {
			p.armed.Store(false)
			p.closeAll()
			return
		}
		tail = append([]byte(nil), seen[max(0, len(seen)-5):]...)
	}
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
