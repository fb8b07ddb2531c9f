// Package rabbitmq publishes outbox messages to a RabbitMQ exchange over AMQP 0-9-1
// (rabbitmq/amqp091-go).
//
// Invariant: a nil result means the broker confirmed the message (a publisher-confirm
// ack) and did not return it, so it was routed to at least one queue. Every message is
// published mandatory: one no queue takes comes back as basic.return and fails
// permanently, never silently dropped. A batch goes out on one channel in order and
// its confirms are awaited together, one round trip per batch. A message the broker
// would refuse for its form (routing key or header name too long, headers beyond a
// frame, payload over max_message_bytes) is refused before anything is sent and fails
// alone. A channel the broker closed (a missing exchange) or a connection that dropped
// is replaced on the next publish: the driver never dies of either.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package rabbitmq is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
)

const (
	// maxIdleChannels bounds the confirm-mode channels kept open between publishes; a
	// publish takes one for itself, so this is how many batches go out at once without
	// opening a channel first.
	maxIdleChannels = 16
	// closeTimeout bounds the close handshake with the broker in Close.
	closeTimeout = 5 * time.Second
)

var _ router.Driver = (*Driver)(nil)

// Driver publishes to one RabbitMQ exchange over one connection. It is safe for
// concurrent use: concurrent publishes use channels of their own.
type Driver struct {
	name     string
	log      *slog.Logger
	dialer   *dialer
	exchange string
	timeout  time.Duration
	maxBytes int

	// life is held for reading by every Publish and Probe and for writing by Close, so
	// Close waits for publishes in flight and none starts on a closed driver.
	life   sync.RWMutex
	closed atomic.Bool

	connecting chan struct{} // one slot: one dial at a time

	mu   sync.Mutex
	sess *session   // the connection; nil before the first publish and after Close
	idle []*channel // open confirm-mode channels of sess, none with a message in flight

	// tweak, set by tests only, alters a message's publishing before it is sent, to
	// make the broker refuse it.
	tweak func(*router.Message, *amqp.Publishing)
}

// New builds the driver called name. It does not connect: the broker is dialled on the
// first Publish, so a broker that is down does not stop outboxd from starting. It fails
// only for settings it cannot use (a malformed URL, an unreadable CA, certificate or
// key file).
func New(name string, o Options, logger *slog.Logger) (*Driver, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dl, err := newDialer(name, o)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq driver %q: %w", name, err)
	}
	timeout := o.PublishTimeout
	if timeout <= 0 {
		timeout = DefaultPublishTimeout
	}
	maxBytes := o.MaxMessageBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxMessageBytes
	}
	return &Driver{
		name:       name,
		log:        logger.With("driver", name),
		dialer:     dl,
		exchange:   o.Exchange,
		timeout:    timeout,
		maxBytes:   maxBytes,
		connecting: make(chan struct{}, 1),
	}, nil
}

// Publish publishes msgs to the exchange, each with its topic as routing key, and
// returns one error per message once the broker confirmed or returned each, ctx ended
// or the publish timeout passed. Under router.KeyOrdered, no message of a key is sent
// before the key's earlier message of this call is confirmed, and none after one failed.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	d.life.RLock()
	defer d.life.RUnlock()
	switch {
	case d.closed.Load():
		return fill(errs, d.closedErr())
	case ctx.Err() != nil:
		return fill(errs, router.Canceled(ctx.Err()))
	}
	pctx, cancel := context.WithTimeoutCause(ctx, d.timeout, errPublishTimeout)
	defer cancel()

	frameMax := d.frameMax()
	ordered := router.KeyOrdered(ctx)
	stopped := map[string]int64{} // key → id of its message that did not go through
	inWave := map[string]bool{}   // keys with a message in wave
	var wave []int
	flush := func() {
		if len(wave) == 0 {
			return
		}
		d.sendWave(pctx, msgs, wave, errs)
		for _, i := range wave {
			if k := msgs[i].Key; ordered && k != nil && errs[i] != nil {
				if _, ok := stopped[string(k)]; !ok {
					stopped[string(k)] = msgs[i].ID
				}
			}
		}
		wave = wave[:0]
		clear(inWave)
	}
	for i := range msgs {
		m := &msgs[i]
		if err := check(m, d.maxBytes, frameMax); err != nil {
			errs[i] = err
			if ordered && m.Key != nil {
				if _, ok := stopped[string(m.Key)]; !ok {
					stopped[string(m.Key)] = m.ID
				}
			}
			continue
		}
		if ordered && m.Key != nil {
			if inWave[string(m.Key)] {
				flush()
			}
			if id, ok := stopped[string(m.Key)]; ok {
				errs[i] = router.HeldBack(fmt.Errorf("message %d waits for message %d of key %q, which did not go through", m.ID, id, m.Key))
				continue
			}
			inWave[string(m.Key)] = true
		}
		wave = append(wave, i)
	}
	flush()
	return errs
}

// sendWave publishes the messages msgs[i] for i in wave on one channel and writes each
// one's result into errs[i]. When the broker closes the channel for what one message
// carried, the messages it left unconfirmed are published again one by one, so that
// only that message fails.
func (d *Driver) sendWave(ctx context.Context, msgs []router.Message, wave []int, errs []error) {
	if reason := d.blockedReason(); reason != "" {
		// It would not read what we send: fail at once, costing no attempt, rather than
		// wait out the timeout on a channel that then cannot even be closed.
		err := router.Unreachable(fmt.Errorf("rabbitmq: the broker blocks publishing (%s)", reason))
		for _, i := range wave {
			errs[i] = err
		}
		return
	}
	c, err := d.channel(ctx)
	if err != nil {
		err = d.connectFailed(ctx, err)
		for _, i := range wave {
			errs[i] = err
		}
		return
	}
	out := c.publish(ctx, d.exchange, msgs, wave, d.publishing)
	if out.clean {
		d.release(c)
	} else {
		c.discard()
	}
	var why error
	if out.closed {
		why = d.channelClosedErr(c, out.closedBy)
	}
	var unresolved []int
	for k, i := range wave {
		f := &out.fates[k]
		switch {
		case f.returned != nil:
			errs[i] = classify(&returnedError{exchange: d.exchange, ret: f.returned})
		case f.acked:
			errs[i] = nil
		case f.nacked:
			errs[i] = classify(fmt.Errorf("rabbitmq: publish to %s: %w", d.exchangeName(), errNack))
		case ctx.Err() != nil:
			errs[i] = d.interrupted(ctx)
		case out.closed:
			errs[i] = why
			unresolved = append(unresolved, i)
		default:
			errs[i] = classify(fmt.Errorf("rabbitmq: publish to %s: %w", d.exchangeName(), f.sendErr))
		}
	}
	if len(unresolved) > 1 && singleMessageFault(out.closedBy, c.sess) {
		for _, i := range unresolved {
			d.sendWave(ctx, msgs, []int{i}, errs)
		}
	}
}

// singleMessageFault reports a channel the broker closed for what one message carried
// (a message above its max_message_size, say), rather than for the exchange, which all
// messages share, or the connection.
func singleMessageFault(why *amqp.Error, s *session) bool {
	if why == nil || !why.Server || s.conn.IsClosed() {
		return false
	}
	switch why.Code {
	case amqp.NotFound, amqp.AccessRefused:
		return false
	}
	return router.KindOf(classify(why)) == router.KindPermanent
}

// channelClosedErr is the error of the messages a closed channel left unconfirmed.
func (d *Driver) channelClosedErr(c *channel, why *amqp.Error) error {
	switch {
	case d.closed.Load():
		return d.closedErr()
	case c.sess.conn.IsClosed():
		d.forget(c.sess)
		return classify(&connectionLostError{cause: why})
	case why == nil:
		return classify(fmt.Errorf("rabbitmq: channel closed before the broker confirmed: %w", amqp.ErrClosed))
	}
	return classify(fmt.Errorf("rabbitmq: publish to %s: the broker closed the channel: %w", d.exchangeName(), why))
}

// publishing is m as it is sent.
func (d *Driver) publishing(m *router.Message, now time.Time) amqp.Publishing {
	p := publishing(m, now)
	if d.tweak != nil {
		d.tweak(m, &p)
	}
	return p
}

// interrupted is the error of a message left unconfirmed when ctx ended: canceled when
// the caller's context ended, retryable when the publish timeout passed.
func (d *Driver) interrupted(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errPublishTimeout) {
		return router.Retryable(fmt.Errorf("rabbitmq: no confirm within publish_timeout (%s): %w", d.timeout, errConfirmTimeout))
	}
	return router.Canceled(ctx.Err())
}

// connectFailed is the error of messages that could not be sent for want of a channel.
func (d *Driver) connectFailed(ctx context.Context, err error) error {
	switch {
	case d.closed.Load():
		return d.closedErr()
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), errPublishTimeout):
		return router.Canceled(fmt.Errorf("rabbitmq: connect to %s: %w", d.dialer.shown, ctx.Err()))
	}
	return classify(&connectError{addr: d.dialer.shown, err: err})
}

func (d *Driver) exchangeName() string {
	if d.exchange == "" {
		return "the default exchange"
	}
	return fmt.Sprintf("exchange %q", d.exchange)
}

// closedErr is every message's error after Close: unreachable, because the broker never
// saw it, so it costs no attempt.
func (d *Driver) closedErr() error {
	return router.Unreachable(fmt.Errorf("rabbitmq driver %q: %w", d.name, router.ErrClosed))
}

// Close waits for publishes in flight, then closes the connection. A second Close does
// nothing.
func (d *Driver) Close() error {
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	s := d.sess
	d.sess, d.idle = nil, nil
	d.mu.Unlock()
	if s == nil {
		return nil
	}
	if err := s.conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close rabbitmq driver %q: %w", d.name, err)
	}
	return nil
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
