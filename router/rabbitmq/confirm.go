package rabbitmq

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
)

const (
	// returnBuffer holds basic.returns until the publish waiting on the channel takes
	// them; it reads them while it waits, so this only spares the library's reader a
	// hand-over per return.
	returnBuffer = 64
	// stuckSend is how long a send may stay blocked after its publish ended (a broker
	// that stopped reading the socket) before the connection is cut to free it.
	stuckSend = time.Second
)

// channel is one confirm-mode AMQP channel with its listeners.
type channel struct {
	sess    *session
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error // the broker's reason when it closes the channel
}

// fate is what became of one message of a wave.
type fate struct {
	sent     bool
	acked    bool         // the broker confirmed it (a returned message is confirmed too)
	nacked   bool         // the broker refused it while the channel stayed open
	returned *amqp.Return // the broker could not route it
	sendErr  error        // why it was not sent
}

// waveOutcome is what became of a wave and of the channel it went out on.
type waveOutcome struct {
	fates    []fate
	closedBy *amqp.Error // the channel's closing reason, if the broker gave one
	closed   bool        // the channel is closed
	clean    bool        // the channel is open with nothing in flight: it may be reused
}

// openChannel opens a channel on s in confirm mode, with its return and close listeners
// registered before anything is published on it.
func openChannel(s *session) (*channel, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	c := &channel{
		sess:    s,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, returnBuffer)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	if err := ch.Confirm(false); err != nil {
		c.discard()
		return nil, err
	}
	return c, nil
}

// usable reports an open channel on an open connection.
func (c *channel) usable() bool { return !c.ch.IsClosed() && !c.sess.conn.IsClosed() }

// discard closes the channel in the background, reading returns meanwhile so that the
// library's reader never waits on a channel nobody reads.
func (c *channel) discard() {
	go func() {
		go func() {
			for range c.returns {
				// dropped: nobody waits for this channel's messages any more
			}
		}()
		_ = c.ch.Close()
	}()
}

// publish sends the messages msgs[i], i in wave, in order, each mandatory, then waits
// for all their confirms, reading returns as they come. The broker sends a message's
// basic.return before its basic.ack, and the library hands the return over before it
// records the ack, so once every confirm is in, every return is in too.
func (c *channel) publish(ctx context.Context, exchange string, msgs []router.Message, wave []int,
	build func(*router.Message, time.Time) amqp.Publishing) waveOutcome {
	out := waveOutcome{fates: make([]fate, len(wave))}
	dcs := make([]*amqp.DeferredConfirmation, len(wave))
	now := time.Now()

	sent := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(stuckSend)
		defer t.Stop()
		select {
		case <-sent:
		case <-t.C:
			_ = c.sess.conn.CloseDeadline(time.Now())
		}
	})
	var stopped error // why nothing more is sent
	c.sess.sock.cork()
	for k, i := range wave {
		if stopped == nil {
			stopped = ctx.Err()
		}
		if stopped != nil {
			out.fates[k].sendErr = stopped
			continue
		}
		dc, err := c.ch.PublishWithDeferredConfirm(exchange, msgs[i].Topic, true, false, build(&msgs[i], now))
		if err != nil {
			stopped = err
			out.fates[k].sendErr = err
			continue
		}
		out.fates[k].sent = true
		dcs[k] = dc
	}
	c.sess.sock.uncork()
	close(sent)
	stop()

	returns := c.returns
	take := func(r amqp.Return) {
		for k, i := range wave {
			f := &out.fates[k]
			if f.sent && f.returned == nil && r.MessageId == msgs[i].DedupID() && r.RoutingKey == msgs[i].Topic {
				f.returned = &r
				return
			}
		}
	}
wait:
	for _, dc := range dcs {
		if dc == nil {
			continue
		}
		for {
			select {
			case <-dc.Done():
				continue wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				take(r)
			case <-ctx.Done():
				break wait
			}
		}
	}
	for returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			take(r)
		default:
			returns = nil
		}
	}

	out.closed = c.ch.IsClosed()
	if out.closed {
		select {
		case why := <-c.closes:
			out.closedBy = why
		default:
		}
	}
	settled := stopped == nil
	for k, dc := range dcs {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
			f := &out.fates[k]
			f.acked = dc.Acked()
			f.nacked = !f.acked && !out.closed
		default:
			settled = false
		}
	}
	out.clean = settled && !out.closed
	return out
}
