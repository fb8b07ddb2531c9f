// Package nats publishes outbox messages with core NATS.
//
// Invariant: a nil result means the server received the message: every batch is
// published and then flushed once (a PING answered by a PONG, which the server sends
// only after reading everything before it), and no message is confirmed before that
// flush returned. This is weaker than the other drivers, and meant to be: core NATS
// stores nothing, so a message nobody subscribed to at that moment is gone, and nothing
// says a subscriber got it. Streams that need the message kept belong on the jetstream
// driver.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package nats is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

var _ router.Driver = (*Driver)(nil)

// Driver publishes to core NATS over one connection.
type Driver struct {
	name    string
	nc      *nats.Conn
	timeout time.Duration

	closeOnce sync.Once
	done      chan struct{} // closed by Close
}

// New connects the driver called name. It succeeds while the server is down (the
// connection keeps trying) and fails only for settings it cannot use. A zero
// PublishTimeout takes the documented default.
func New(name string, cfg Options, logger *slog.Logger) (*Driver, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.PublishTimeout
	if timeout <= 0 {
		timeout = natsconn.DefaultPublishTimeout
	}
	nc, err := natsconn.Connect(name, cfg.Options, logger.With("driver", name))
	if err != nil {
		return nil, err
	}
	return &Driver{name: name, nc: nc, timeout: timeout, done: make(chan struct{})}, nil
}

// Publish publishes msgs and flushes once, bounded by ctx and the publish timeout. A
// message the client refuses fails alone; a failed flush fails every message not failed
// already as unreachable (the server may or may not have them; delivery is at least
// once, so publishing them again is safe).
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	if err := d.unusable(ctx); err != nil {
		return fill(errs, err)
	}
	// Watch the connection from here on: once it drops, what was published may be lost,
	// and a flush would wait for a PONG that cannot come.
	lost := d.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer d.nc.RemoveStatusListener(lost)
	if err := natsconn.NotConnected(d.nc); err != nil {
		return fill(errs, router.Unreachable(fmt.Errorf("driver %s: %w", d.name, err)))
	}
	sent := 0
	var build natsconn.Builder // PublishMsg copies each message before the next is built
	for i := range msgs {
		m := &msgs[i]
		if err := ctx.Err(); err != nil {
			errs[i] = router.Canceled(err)
			continue
		}
		if err := natsconn.CheckSubject(m.Topic); err != nil {
			errs[i] = router.Permanent(err)
			continue
		}
		msg, err := build.Msg(m, false, "")
		if err != nil {
			errs[i] = router.Permanent(fmt.Errorf("publish to %s: %w", m.Topic, err))
			continue
		}
		if err := d.nc.PublishMsg(msg); err != nil {
			errs[i] = d.failed(fmt.Errorf("publish to %s: %w", m.Topic, err))
			continue
		}
		sent++
	}
	if sent == 0 {
		return errs
	}
	if err := d.flush(ctx, lost); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

var (
	errConnectionLost = errors.New("connection lost before the server confirmed the batch")
	errNoPong         = errors.New("no PONG within the publish timeout")
)

// flush waits until the server has read everything published before it, the caller's
// ctx ends, the publish timeout passes or lost reports the connection gone. A connection
// lost at any point since lost was registered fails the flush even if a PONG came: the
// client reconnects on its own and the PONG may come from a new connection, while what
// was published went down with the old one.
func (d *Driver) flush(ctx context.Context, lost <-chan nats.Status) error {
	watched, stopWatching := context.WithCancelCause(ctx)
	defer stopWatching(nil)
	fctx, cancel := context.WithTimeoutCause(watched, d.timeout, errNoPong)
	defer cancel()
	var wasLost bool // written by the watcher, read once it has returned
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case _, ok := <-lost:
			if ok {
				wasLost = true
				stopWatching(errConnectionLost)
			}
		case <-fctx.Done():
		}
	}()
	err := d.nc.FlushWithContext(fctx)
	cancel()
	<-watcher
	if !wasLost {
		select {
		case _, ok := <-lost:
			wasLost = ok
		default:
		}
	}
	switch {
	case ctx.Err() != nil:
		if err == nil && !wasLost {
			return nil
		}
		return router.Canceled(fmt.Errorf("flush: %w", ctx.Err()))
	case d.isClosed() && (err != nil || wasLost):
		return d.closedErr()
	case wasLost:
		return classifyFlush(fmt.Errorf("flush: %w: %w", errConnectionLost, nats.ErrDisconnected))
	case err == nil:
		return nil
	case errors.Is(context.Cause(fctx), errNoPong):
		err = fmt.Errorf("%w (%s): %w", errNoPong, d.timeout, nats.ErrTimeout)
	}
	return classifyFlush(fmt.Errorf("flush: %w", err))
}

// unusable says why no message of a batch can be published now, or nil.
func (d *Driver) unusable(ctx context.Context) error {
	if d.isClosed() {
		return d.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return router.Canceled(err)
	}
	return nil
}

// failed classifies a publish error. Once Close was called, any failure is reported as
// the driver being closed.
func (d *Driver) failed(err error) error {
	if d.isClosed() {
		return d.closedErr()
	}
	return classify(err)
}

func (d *Driver) isClosed() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// closedErr is every message's error after Close: unreachable, because the broker never
// saw it, so it costs no attempt.
func (d *Driver) closedErr() error {
	return router.Unreachable(fmt.Errorf("driver %s: %w", d.name, router.ErrClosed))
}

// Close closes the connection. It is idempotent.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.done)
		d.nc.Close()
	})
	return nil
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
