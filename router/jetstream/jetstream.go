// Package jetstream publishes outbox messages to NATS JetStream.
//
// Invariant: a nil result means the stream stored the message: each message is
// confirmed by its own PubAck, and a message whose PubAck has not arrived is never
// reported as published. Every message carries Nats-Msg-Id = Message.DedupID(), so a
// message published again inside the stream's duplicate window is dropped by the server
// and acknowledged as a duplicate (a success, counted by Duplicates and reported to the
// caller through router.WithDuplicates). A subject no stream captures
// is a permanent error, never a silent fall-back to core NATS.
//
// A batch is published asynchronously through a window of at most MaxInFlight messages
// awaiting their PubAck, shared by every Publish call on the driver; when it is full,
// Publish waits for acknowledgements. The driver speaks JetStream's publish protocol on
// the core connection itself: each message's reply subject, in an inbox of the driver's
// own, names its batch and its place in it, and the PubAck the server sends there
// settles that message. The client library's asynchronous publisher did the same at
// about twice the cost per message (a timer, a map entry and channels per message, a
// goroutine hand-off per acknowledgement; docs/benchmarks.md); its decisions are kept:
// the same errors, the same two retries of a "no responders" answer, a publish timeout
// per message, and every message awaiting its PubAck failed when the connection is lost.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package jetstream is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

var _ router.Driver = (*Driver)(nil)

// Driver publishes to JetStream over one connection.
type Driver struct {
	name    string
	nc      *nats.Conn
	timeout time.Duration
	inbox   string // every reply subject is inbox + "<batch>.<index>"
	sub     *nats.Subscription
	status  chan nats.Status // the connection going down or closed

	mu        sync.Mutex
	batches   map[uint64]*batch // every batch with a message awaiting its PubAck
	lastBatch uint64
	inFlight  int           // messages handed to the connection and not settled
	window    int           // MaxInFlight
	room      chan struct{} // closed when a message settles; nil while nobody waits for room

	// handing, when set (by tests), runs before message n (counted from 0 since New)
	// is handed to the connection, with the number of messages then in flight.
	handing func(n, inFlight int)
	handed  int

	duplicates atomic.Uint64
	closeOnce  sync.Once
	done       chan struct{} // closed by Close
}

// New connects the driver called name. It succeeds while the server is down (the
// connection keeps trying) and fails only for settings it cannot use. A zero
// PublishTimeout or MaxInFlight takes the documented default. PublishTimeout bounds the
// wait for each message's PubAck.
func New(name string, cfg Options, logger *slog.Logger) (*Driver, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	timeout, inFlight := cfg.PublishTimeout, cfg.MaxInFlight
	if timeout <= 0 {
		timeout = natsconn.DefaultPublishTimeout
	}
	if inFlight <= 0 {
		inFlight = DefaultMaxInFlight
	}
	nc, err := natsconn.Connect(name, cfg.Options, logger.With("driver", name))
	if err != nil {
		return nil, err
	}
	d := &Driver{
		name:    name,
		nc:      nc,
		timeout: timeout,
		inbox:   nc.NewInbox() + ".",
		batches: map[uint64]*batch{},
		window:  inFlight,
		done:    make(chan struct{}),
	}
	// Subscribing needs no server: the connection sends it whenever it (re)connects.
	if d.sub, err = nc.Subscribe(d.inbox+"*.*", d.onReply); err != nil {
		nc.Close()
		return nil, fmt.Errorf("driver %s: subscribe to PubAcks: %w", name, err)
	}
	d.status = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	go d.watch()
	return d, nil
}

// Duplicates is how many messages the server acknowledged as duplicates of a message
// it already stored (same Nats-Msg-Id inside the duplicate window) since New.
func (d *Driver) Duplicates() uint64 { return d.duplicates.Load() }

// Publish publishes msgs asynchronously and returns when every message has its PubAck
// or its error, or when ctx ends or the driver is closed: then every message without a
// PubAck gets that reason.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	if err := d.unusable(ctx); err != nil {
		return fill(errs, err)
	}
	b := d.begin(msgs)
	var build natsconn.Builder
	var stop error // why the batch ended early
	for i := range msgs {
		m, s := &msgs[i], &b.slots[i]
		if err := natsconn.CheckSubject(m.Topic); err != nil {
			s.err = router.Permanent(err)
			continue
		}
		msg, err := build.Msg(m, true, s.reply)
		if err != nil {
			s.err = router.Permanent(fmt.Errorf("publish to %s: %w", m.Topic, err))
			continue
		}
		if stop = d.handOver(ctx, b, i); stop != nil {
			break
		}
		if err := d.nc.PublishMsg(msg); err != nil {
			d.mu.Lock()
			d.settle(b, i, d.failed(m.Topic, err))
			d.mu.Unlock()
		}
	}
	if stop == nil {
		stop = d.wait(ctx, b)
	}
	return d.confirmNoStream(ctx, msgs, d.finish(ctx, b, errs, stop))
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
		d.nc.Close()
		d.mu.Lock()
		d.settleAll(router.ErrClosed) // reported as closedErr: done is closed
		d.mu.Unlock()
	})
	return nil
}

// fill sets err on every message.
func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
