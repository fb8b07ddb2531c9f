package rabbitmq

import (
	"context"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
)

// defaultFrameMax is the frame size assumed before a connection negotiated one: the
// library's proposal, which is also RabbitMQ's default frame_max.
const defaultFrameMax = 131072

// session is one AMQP connection and what the broker said about it.
type session struct {
	conn    *amqp.Connection
	sock    *corkConn
	blocked atomic.Pointer[string] // the broker's reason while it blocks publishing
}

// newSession watches conn: whether the broker blocks publishing on it (a memory or
// disk alarm), and its loss, which is logged unless the driver closed it.
func (d *Driver) newSession(conn *amqp.Connection, sock *corkConn) *session {
	s := &session{conn: conn, sock: sock}
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for blocks != nil || closes != nil {
			select {
			case b, ok := <-blocks:
				switch {
				case !ok:
					blocks = nil
				case b.Active:
					d.log.Warn("RabbitMQ blocks publishing", "reason", b.Reason)
					s.blocked.Store(&b.Reason)
				default:
					d.log.Info("RabbitMQ unblocked publishing")
					s.blocked.Store(nil)
				}
			case err, ok := <-closes:
				if !ok {
					closes = nil
					continue
				}
				if err != nil && !d.closed.Load() {
					d.log.Warn("connection to RabbitMQ lost; reconnecting on the next publish", "error", err)
				}
			}
		}
	}()
	return s
}

// blockedReason is the broker's reason for blocking publishing on the connection, or "".
func (d *Driver) blockedReason() string {
	d.mu.Lock()
	s := d.sess
	d.mu.Unlock()
	if s == nil {
		return ""
	}
	if r := s.blocked.Load(); r != nil {
		if *r == "" {
			return "no reason given"
		}
		return *r
	}
	return ""
}

// channel returns an idle channel, or opens one, connecting first when there is no
// connection or it was lost.
func (d *Driver) channel(ctx context.Context) (*channel, error) {
	d.mu.Lock()
	for len(d.idle) > 0 {
		c := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		if c.usable() {
			d.mu.Unlock()
			return c, nil
		}
		c.discard()
	}
	s := d.sess
	d.mu.Unlock()

	for attempt := 0; ; attempt++ {
		if s == nil || s.conn.IsClosed() {
			var err error
			if s, err = d.connect(ctx); err != nil {
				return nil, err
			}
		}
		c, err := within(ctx, func() (*channel, error) { return openChannel(s) }, (*channel).discard)
		if err != nil && s.conn.IsClosed() && attempt == 0 && ctx.Err() == nil {
			// The connection was lost before anything told us; make a new one, once.
			d.forget(s)
			continue
		}
		return c, err
	}
}

// connect returns the current connection, dialling a new one when it is missing or
// lost. One dial runs at a time; a publish waiting for it gives up when ctx ends.
func (d *Driver) connect(ctx context.Context) (*session, error) {
	select {
	case d.connecting <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.connecting }()
	d.mu.Lock()
	s := d.sess
	d.mu.Unlock()
	if s != nil && !s.conn.IsClosed() {
		return s, nil // another publish connected while this one waited
	}
	if d.closed.Load() {
		return nil, router.ErrClosed
	}
	conn, sock, err := d.dialer.dial(ctx)
	if err != nil {
		return nil, err
	}
	s = d.newSession(conn, sock)
	d.mu.Lock()
	old, idle := d.sess, d.idle
	d.sess, d.idle = s, nil
	d.mu.Unlock()
	for _, c := range idle {
		c.discard()
	}
	if old != nil {
		go func() { _ = old.conn.Close() }()
	}
	d.log.Info("connected to RabbitMQ", "server", d.dialer.shown, "vhost", conn.Config.Vhost)
	return s, nil
}

// release hands a channel with nothing in flight back for the next publish.
func (d *Driver) release(c *channel) {
	d.mu.Lock()
	keep := c.sess == d.sess && len(d.idle) < maxIdleChannels && !d.closed.Load()
	if keep {
		d.idle = append(d.idle, c)
	}
	d.mu.Unlock()
	if !keep {
		c.discard()
	}
}

// forget drops s, a lost connection, so that the next publish dials a new one.
func (d *Driver) forget(s *session) {
	d.mu.Lock()
	if d.sess == s {
		d.sess, d.idle = nil, nil
	}
	d.mu.Unlock()
	go func() { _ = s.conn.Close() }()
}

// frameMax is the largest frame the connection may carry.
func (d *Driver) frameMax() int {
	d.mu.Lock()
	s := d.sess
	d.mu.Unlock()
	if s != nil && s.conn.Config.FrameSize > 0 {
		return s.conn.Config.FrameSize
	}
	return defaultFrameMax
}

// within runs f, which the library cannot interrupt, and returns its result, or ctx's
// error when ctx ends first; a result that comes too late is handed to undo.
func within[T any](ctx context.Context, f func() (T, error), undo func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				undo(r.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}
