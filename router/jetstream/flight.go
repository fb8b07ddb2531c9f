package jetstream

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

// What the driver does with a "no responders" answer, as the client library's
// asynchronous publisher does: publish again twice, a quarter of a second apart, to
// ride out a stream whose leader is changing; then no stream captures the subject.
const (
	noRespondersRetries = 2
	noRespondersWait    = 250 * time.Millisecond
)

// A slot's state: not handed to the connection (refused before, or never reached),
// awaiting its PubAck, or settled.
const (
	slotIdle uint8 = iota
	slotFlying
	slotSettled
)

// batch is one Publish call's messages. Its slots are guarded by Driver.mu once the
// batch is registered, except err of an idle slot, which only Publish writes.
type batch struct {
	id     uint64
	msgs   []router.Message // the caller's: read only while open
	slots  []slot
	flying int           // slots awaiting their PubAck
	open   bool          // Publish has not returned
	wake   chan struct{} // capacity 1: flying fell to 0
	reaper *time.Timer   // after Publish returned early: times out what is left
}

type slot struct {
	state   uint8
	retries uint8     // "no responders" answers published again
	dup     bool      // its PubAck said the stream already held its Nats-Msg-Id
	sent    time.Time // handed to the connection (last time, when published again)
	topic   string
	reply   string
	err     error // once settled, or when refused before being handed over
}

// begin registers a batch for msgs, with the reply subject of each message: all of
// them are cut from one string.
func (d *Driver) begin(msgs []router.Message) *batch {
	d.mu.Lock()
	d.lastBatch++
	id := d.lastBatch
	d.mu.Unlock()

	prefix := d.inbox + strconv.FormatUint(id, 10) + "."
	buf := make([]byte, 0, len(msgs)*(len(prefix)+4))
	ends := make([]int, len(msgs))
	for i := range msgs {
		buf = append(buf, prefix...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		ends[i] = len(buf)
	}
	replies := string(buf)
	b := &batch{id: id, msgs: msgs, slots: make([]slot, len(msgs)), open: true, wake: make(chan struct{}, 1)}
	start := 0
	for i := range b.slots {
		b.slots[i].topic, b.slots[i].reply = msgs[i].Topic, replies[start:ends[i]]
		start = ends[i]
	}
	d.mu.Lock()
	d.batches[id] = b
	d.mu.Unlock()
	return b
}

// handOver waits for room in the window and marks message i as awaiting its PubAck.
// It fails when ctx ends or the driver is closed first.
func (d *Driver) handOver(ctx context.Context, b *batch, i int) error {
	if err := ctx.Err(); err != nil {
		return router.Canceled(err)
	}
	d.mu.Lock()
	for d.inFlight >= d.window {
		if d.room == nil {
			d.room = make(chan struct{})
		}
		room := d.room
		d.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return router.Canceled(ctx.Err())
		case <-d.done:
			return d.closedErr()
		}
		d.mu.Lock()
	}
	select {
	case <-d.done:
		d.mu.Unlock()
		return d.closedErr()
	default:
	}
	n, inFlight, hook := d.handed, d.inFlight, d.handing
	d.handed++
	d.inFlight++
	s := &b.slots[i]
	s.state, s.sent = slotFlying, time.Now()
	b.flying++
	d.mu.Unlock()
	if hook != nil {
		hook(n, inFlight)
	}
	return nil
}

// wait returns once no message of b awaits its PubAck, or why it stopped waiting. It
// times out each message PublishTimeout after it was handed over.
func (d *Driver) wait(ctx context.Context, b *batch) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d.mu.Lock()
		if b.flying == 0 {
			d.mu.Unlock()
			return nil
		}
		next := d.nextTimeout(b)
		d.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(time.Until(next))
		} else {
			timer.Reset(time.Until(next))
		}
		select {
		case <-b.wake:
		case <-timer.C:
			d.mu.Lock()
			d.expire(b, time.Now())
			d.mu.Unlock()
		case <-ctx.Done():
			return router.Canceled(ctx.Err())
		case <-d.done:
			return d.closedErr()
		}
	}
}

// nextTimeout is when the first message of b awaiting its PubAck times out.
func (d *Driver) nextTimeout(b *batch) time.Time {
	var first time.Time
	for i := range b.slots {
		if s := &b.slots[i]; s.state == slotFlying && (first.IsZero() || s.sent.Before(first)) {
			first = s.sent
		}
	}
	return first.Add(d.timeout)
}

// expire fails every message of b that has awaited its PubAck for PublishTimeout at now.
func (d *Driver) expire(b *batch, now time.Time) {
	for i := range b.slots {
		if s := &b.slots[i]; s.state == slotFlying && !now.Before(s.sent.Add(d.timeout)) {
			d.settle(b, i, d.failed(s.topic, jetstream.ErrAsyncPublishTimeout))
		}
	}
}

// finish gives each message its result: its PubAck's or its own error, else stop, and
// reports the confirmed duplicates to ctx (router.NoteDuplicates). Messages still
// awaiting their PubAck stay in the window until they settle or time out.
func (d *Driver) finish(ctx context.Context, b *batch, errs []error, stop error) []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b.open = false
	b.msgs = nil
	var last time.Time
	dups := 0
	for i := range b.slots {
		s := &b.slots[i]
		switch {
		case s.state == slotSettled || s.state == slotIdle && s.err != nil:
			errs[i] = s.err
			if s.err == nil && s.dup {
				dups++
			}
		default:
			errs[i] = stop
		}
		if s.state == slotFlying && s.sent.After(last) {
			last = s.sent
		}
	}
	router.NoteDuplicates(ctx, dups)
	if b.flying == 0 {
		delete(d.batches, b.id)
		return errs
	}
	b.reaper = time.AfterFunc(time.Until(last.Add(d.timeout)), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.expire(b, last.Add(d.timeout))
	})
	return errs
}

// settle gives message i of b its result, unless it has one, and returns its place in
// the window. Called with d.mu held.
func (d *Driver) settle(b *batch, i int, err error) {
	s := &b.slots[i]
	if s.state != slotFlying {
		return
	}
	s.state, s.err = slotSettled, err
	b.flying--
	d.inFlight--
	if d.room != nil {
		close(d.room)
		d.room = nil
	}
	if b.flying > 0 {
		return
	}
	if b.open {
		select {
		case b.wake <- struct{}{}:
		default:
		}
		return
	}
	delete(d.batches, b.id)
	if b.reaper != nil {
		b.reaper.Stop()
	}
}

// settleAll fails every message awaiting its PubAck with err. Called with d.mu held.
func (d *Driver) settleAll(err error) {
	for _, b := range d.batches {
		for i := range b.slots {
			if s := &b.slots[i]; s.state == slotFlying {
				d.settle(b, i, d.failed(s.topic, err))
			}
		}
	}
}

// watch fails every message awaiting its PubAck when the connection goes down: the
// server may never answer them, as the client library's publisher assumes too. Messages
// the server did store are then published again and dropped as duplicates.
func (d *Driver) watch() {
	for {
		select {
		case <-d.done:
			return
		case _, ok := <-d.status:
			if !ok {
				return
			}
			d.mu.Lock()
			d.settleAll(nats.ErrDisconnected)
			d.mu.Unlock()
		}
	}
}

// onReply settles the message whose reply subject m was sent to.
func (d *Driver) onReply(m *nats.Msg) {
	id, i, ok := d.parseReply(m.Subject)
	if !ok {
		return
	}
	noResponders := len(m.Data) == 0 && m.Header.Get("Status") == "503"
	var ack pubAck
	if !noResponders {
		ack = parsePubAck(m.Data)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.batches[id]
	if b == nil || i >= len(b.slots) || b.slots[i].state != slotFlying {
		return // timed out or failed already
	}
	s := &b.slots[i]
	switch {
	case noResponders && s.retries < noRespondersRetries && b.open:
		s.retries++
		time.AfterFunc(noRespondersWait, func() { d.republish(b, i) })
	case noResponders:
		d.settle(b, i, d.failed(s.topic, jetstream.ErrNoStreamResponse))
	case ack.err != nil:
		d.settle(b, i, d.failed(s.topic, ack.err))
	default:
		if ack.duplicate {
			d.duplicates.Add(1)
			s.dup = true
		}
		d.settle(b, i, nil)
	}
}

// republish publishes message i of b again after a "no responders" answer, with its
// publish timeout starting again.
func (d *Driver) republish(b *batch, i int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &b.slots[i]
	if s.state != slotFlying {
		return
	}
	if !b.open { // nobody waits for it any more
		d.settle(b, i, d.failed(s.topic, jetstream.ErrNoStreamResponse))
		return
	}
	var build natsconn.Builder
	msg, err := build.Msg(&b.msgs[i], true, s.reply)
	if err == nil { // it was checked once already
		s.sent = time.Now()
		err = d.nc.PublishMsg(msg)
	}
	if err != nil {
		d.settle(b, i, d.failed(s.topic, err))
	}
}

// parseReply reads the batch and index a reply subject names.
func (d *Driver) parseReply(subject string) (id uint64, i int, ok bool) {
	if len(subject) <= len(d.inbox) || subject[:len(d.inbox)] != d.inbox {
		return 0, 0, false
	}
	rest := subject[len(d.inbox):]
	dot := -1
	for j := 0; j < len(rest); j++ {
		if rest[j] == '.' {
			dot = j
			break
		}
	}
	if dot < 0 {
		return 0, 0, false
	}
	id, err := strconv.ParseUint(rest[:dot], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(rest[dot+1:], 10, 31)
	if err != nil {
		return 0, 0, false
	}
	return id, int(n), true
}
