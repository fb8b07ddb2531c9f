// Package jetstream publishes outbox messages to NATS JetStream.
//
// Invariant: a nil result means the stream stored the message: each message is
// confirmed by its own PubAck, and a message whose PubAck has not arrived is never
// reported as published. Every message carries Nats-Msg-Id = Message.DedupID(), so a
// message published again inside the stream's duplicate window is dropped by the server
// and acknowledged as a duplicate (counted, and a success). A subject no stream captures
// is a permanent error, never a silent fall-back to core NATS.
//
// A batch is published asynchronously through a window of at most MaxInFlight messages
// awaiting their PubAck, shared by every Publish call on the driver; when it is full,
// Publish waits for acknowledgements instead of letting the client stall.
package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

var _ router.Driver = (*Driver)(nil)

// Driver publishes to JetStream over one connection.
type Driver struct {
	name    string
	nc      *nats.Conn
	js      jetstream.JetStream
	timeout time.Duration
	// window holds one token per message published and not yet resolved by the client
	// (acknowledged, refused, timed out or failed by a disconnect). A token is returned
	// only once the client has forgotten the message, so the client's own limit, set to
	// the same size, is never reached and never stalls.
	window     chan struct{}
	duplicates atomic.Uint64

	closeOnce sync.Once
	done      chan struct{} // closed by Close
}

// New connects the driver called name. It succeeds while the server is down (the
// connection keeps trying) and fails only for settings it cannot use. A zero
// PublishTimeout or MaxInFlight takes the documented default. PublishTimeout bounds the
// wait for each message's PubAck.
func New(name string, cfg config.Driver, logger *slog.Logger) (*Driver, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	def := config.DefaultDriver(config.TypeJetStream)
	timeout, inFlight := cfg.PublishTimeout, cfg.MaxInFlight
	if timeout <= 0 {
		timeout = def.PublishTimeout
	}
	if inFlight <= 0 {
		inFlight = def.MaxInFlight
	}
	nc, err := natsconn.Connect(name, cfg, logger.With("driver", name))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(inFlight),
		jetstream.WithPublishAsyncTimeout(timeout),
	)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("driver %s: jetstream: %w", name, err)
	}
	return &Driver{
		name:    name,
		nc:      nc,
		js:      js,
		timeout: timeout,
		window:  make(chan struct{}, inFlight),
		done:    make(chan struct{}),
	}, nil
}

// Duplicates is how many messages the server acknowledged as duplicates of a message
// it already stored (same Nats-Msg-Id inside the duplicate window) since New.
func (d *Driver) Duplicates() uint64 { return d.duplicates.Load() }

// flight is a message handed to the client, awaiting its PubAck.
type flight struct {
	i       int
	subject string
	future  jetstream.PubAckFuture
}

// outcome is the resolution of a flight: nil for a PubAck.
type outcome struct {
	i   int
	err error
}

// Publish publishes msgs asynchronously and returns when every message has its PubAck
// or its error, or when ctx ends or the driver is closed: then every message without a
// PubAck gets that reason.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	if err := d.unusable(ctx); err != nil {
		return fill(errs, err, nil)
	}
	settled := make([]bool, len(msgs))
	settle := func(i int, err error) { errs[i], settled[i] = err, true }

	flights := make(chan flight, len(msgs))
	outcomes := make(chan outcome, len(msgs))
	go d.collect(flights, outcomes)

	var stop error // why the batch ended early
	pending := 0
submit:
	for i := range msgs {
		m := &msgs[i]
		if err := natsconn.CheckSubject(m.Topic); err != nil {
			settle(i, router.Permanent(err))
			continue
		}
		msg := natsconn.Msg(m, 1)
		msg.Header[jetstream.MsgIDHeader] = []string{m.DedupID()}
		if err := natsconn.CheckHeaders(msg.Header); err != nil {
			settle(i, router.Permanent(fmt.Errorf("publish to %s: %w", m.Topic, err)))
			continue
		}
		if err := ctx.Err(); err != nil {
			stop = router.Canceled(err)
			break
		}
		select {
		case d.window <- struct{}{}:
		case <-ctx.Done():
			stop = router.Canceled(ctx.Err())
			break submit
		case <-d.done:
			stop = d.closedErr()
			break submit
		}
		f, err := d.js.PublishMsgAsync(msg)
		if err != nil {
			<-d.window // the client forgot the message at once
			settle(i, d.failed(m.Topic, err))
			continue
		}
		flights <- flight{i: i, subject: m.Topic, future: f}
		pending++
	}
	close(flights)

wait:
	for stop == nil && pending > 0 {
		select {
		case o := <-outcomes:
			settle(o.i, o.err)
			pending--
		case <-ctx.Done():
			stop = router.Canceled(ctx.Err())
			break wait
		case <-d.done:
			stop = d.closedErr()
			break wait
		}
	}
	if stop == nil {
		return errs
	}
	// Keep what was already resolved: a PubAck that arrived is a success even now.
	for drained := false; !drained; {
		select {
		case o := <-outcomes:
			settle(o.i, o.err)
		default:
			drained = true
		}
	}
	return fill(errs, stop, settled)
}

// collect waits for each flight's resolution, in publish order, and returns its token to
// the window. It outlives a Publish that ended early, so that tokens come back only when
// the client has let go of the message; Close resolves whatever is left.
func (d *Driver) collect(flights <-chan flight, outcomes chan<- outcome) {
	for fl := range flights {
		var err error
		select {
		case ack := <-fl.future.Ok():
			if ack.Duplicate {
				d.duplicates.Add(1)
			}
		case ferr := <-fl.future.Err():
			err = d.failed(fl.subject, ferr)
		case <-d.done:
			return
		}
		<-d.window
		outcomes <- outcome{i: fl.i, err: err}
	}
}

// unusable says why no message of a batch can be published now, or nil.
func (d *Driver) unusable(ctx context.Context) error {
	select {
	case <-d.done:
		return d.closedErr()
	default:
	}
	if err := ctx.Err(); err != nil {
		return router.Canceled(err)
	}
	if err := natsconn.NotConnected(d.nc); err != nil {
		return router.Unreachable(fmt.Errorf("driver %s: %w", d.name, err))
	}
	return nil
}

// failed classifies the error of a message to subject. Once Close was called, any
// failure is reported as the driver being closed: the client's errors then say so only
// sometimes (some wrap the closed connection as text).
func (d *Driver) failed(subject string, err error) error {
	select {
	case <-d.done:
		return d.closedErr()
	default:
	}
	return classify(subject, err)
}

// closedErr is every unconfirmed message's error once Close was called: unreachable,
// costing no attempt (the server did not confirm it; publishing it again is safe).
func (d *Driver) closedErr() error {
	return router.Unreachable(fmt.Errorf("driver %s: %w", d.name, router.ErrClosed))
}

// Close fails the messages still awaiting a PubAck and closes the connection. It is
// idempotent.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.done)
		d.js.CleanupPublisher()
		d.nc.Close()
	})
	return nil
}

// fill sets err on every message not settled (all when settled is nil).
func fill(errs []error, err error, settled []bool) []error {
	for i := range errs {
		if settled == nil || !settled[i] {
			errs[i] = err
		}
	}
	return errs
}
