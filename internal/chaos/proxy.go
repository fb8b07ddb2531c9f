// Package chaos puts faults between outboxd and the services it depends on, for the
// fault-injection suite in this package's tests (see docs/chaos.md).
//
// Invariant: a Proxy never invents, drops or reorders bytes inside a connection. It
// forwards them, holds them (Stall), slows them (Delay) or ends whole connections (Cut),
// so whatever a client sees is something a real network or a stalled server could show
// it.
//
// Package chaos is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package chaos

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections accepted on a loopback port to a target address. Tests
// control it: Cut, Stall and Delay inject faults, Restore ends them. It is safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	dialer net.Dialer

	mu     sync.Mutex
	target string
	links  map[*link]struct{}
	cut    bool
	delay  time.Duration
	gate   chan struct{} // non-nil while stalled; closed by Restore
	closed bool

	wg       sync.WaitGroup
	accepted atomic.Int64
	refused  atomic.Int64
	held     atomic.Int64 // chunks read and waiting for a stall to end
}

// link is one proxied connection: the client's and ours to the target.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// Listen starts a proxy on 127.0.0.1 at a free port, forwarding to target (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy to %s: listen: %w", target, err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}, dialer: net.Dialer{Timeout: 5 * time.Second}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address new connections are forwarded to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Retarget forwards new connections to target from now on; live ones keep theirs. It
// lets a proxy exist before its service, whose address may depend on the proxy's (a
// Kafka broker advertising the proxy).
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Cut closes every live connection, both ways, and resets every new one at once until
// Restore: to its clients the service looks gone.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Stall stops forwarding in both directions until Restore. Connections stay open and
// new ones are accepted and connected; their bytes wait, so to its clients the service
// looks alive but does not answer, like a broker far slower than any timeout.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// Delay holds every chunk of bytes for d before forwarding it, in each direction; 0
// forwards at once again.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

// Restore ends every fault: new connections are forwarded again, held bytes flow, and
// the delay is removed. Connections closed by Cut stay closed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.delay = false, 0
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// Live is the number of connections being forwarded now.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Accepted counts the connections forwarded since the start; Refused those reset
// because of a Cut or because the target could not be reached.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused counts the connections reset at once (during a Cut, or target unreachable).
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Held is the number of chunks read and waiting for a Stall to end.
func (p *Proxy) Held() int64 { return p.held.Load() }

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
// A second Close does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.takeLinks()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.mu.Lock()
	if p.gate != nil { // only now: held bytes must not slip out of closed links
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// takeLinks empties the link set and returns what it held; p.mu must be held.
func (p *Proxy) takeLinks() []*link {
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	clear(p.links)
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error (EMFILE and the like): keep serving
		}
		p.mu.Lock()
		cut, closed := p.cut, p.closed
		p.mu.Unlock()
		if cut || closed {
			p.refused.Add(1)
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the target for client c and forwards between them.
func (p *Proxy) connect(c net.Conn) {
	defer p.wg.Done()
	s, err := p.dialer.Dial("tcp", p.Target())
	if err != nil {
		// The target refused or is gone: the client sees a reset, as close to a
		// refused connection as a proxy that already accepted it can show.
		p.refused.Add(1)
		reset(c)
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		_ = s.Close()
		p.refused.Add(1)
		reset(c)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)
	p.wg.Add(2)
	go p.pipe(l, s, c)
	go p.pipe(l, c, s)
}

// pipe copies src to dst chunk by chunk, honouring stalls and delays, and ends the link
// when either side ends.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits until a chunk may be forwarded: no stall and the delay served. It returns
// false when the link ended meanwhile.
func (p *Proxy) pass(l *link) bool {
	for {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		if gate == nil {
			break
		}
		p.held.Add(1)
		select {
		case <-gate: // look again: another Stall may have begun since
			p.held.Add(-1)
		case <-l.done:
			p.held.Add(-1)
			return false
		}
	}
	select {
	case <-l.done:
		return false
	default:
	}
	p.mu.Lock()
	delay := p.delay
	p.mu.Unlock()
	if delay <= 0 {
		return true
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// drop ends a link and forgets it.
func (p *Proxy) drop(l *link) {
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// reset closes c so that its peer sees a reset rather than an orderly end.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
