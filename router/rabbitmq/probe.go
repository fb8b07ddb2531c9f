package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
)

var _ router.Prober = (*Driver)(nil)

// Probe reports whether the broker answers and has the driver's exchange, asked with a
// passive declare on a channel of its own (a missing exchange closes that channel). The
// exchange is the driver's own setting, so it is asked about whatever dest is. On the
// default exchange, a non-empty dest is a queue name, and the queue is asked about
// likewise. Which queues a named exchange routes dest to cannot be asked over AMQP.
func (d *Driver) Probe(ctx context.Context, dest string) error {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed.Load() {
		return d.closedErr()
	}
	s, err := d.connect(ctx)
	if err != nil {
		return &connectError{addr: d.dialer.shown, err: err}
	}
	ask := func(declare func(*amqp.Channel) error) error {
		c, err := within(ctx, func() (*channel, error) { return openChannel(s) }, (*channel).discard)
		if err != nil {
			return &connectError{addr: d.dialer.shown, err: err}
		}
		defer c.discard()
		_, err = within(ctx, func() (struct{}, error) { return struct{}{}, declare(c.ch) }, func(struct{}) {})
		return err
	}
	vhost := s.conn.Config.Vhost
	missing := func(err error, format string, args ...any) error {
		var e *amqp.Error
		if errors.As(err, &e) && e.Code == amqp.NotFound {
			return &router.NoDestinationError{Reason: fmt.Sprintf(format, args...)}
		}
		return err
	}
	if d.exchange != "" {
		err := ask(func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(d.exchange, amqp.ExchangeTopic, false, false, false, false, nil)
		})
		return missing(err, "exchange %q does not exist in vhost %q", d.exchange, vhost)
	}
	if dest == "" {
		return nil
	}
	err = ask(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(dest, false, false, false, false, nil)
		var e *amqp.Error
		if errors.As(err, &e) && e.Code == amqp.ResourceLocked {
			return nil // it exists, exclusive to another connection; publishing to it works
		}
		return err
	})
	return missing(err, "the default exchange routes %q to no queue: vhost %q has no queue of that name", dest, vhost)
}
