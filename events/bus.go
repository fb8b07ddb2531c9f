package events

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Bus fans events out to subscribers. Emit never waits for an asynchronous subscriber:
// a loop that reports an event must not be slowed by whoever listens.
//
// Synchronous subscribers (Subscribe) run inline in Emit, in subscription order, and
// see every event: they are for cheap bookkeeping such as metrics and must return
// quickly. Asynchronous subscribers (SubscribeAsync) each have a goroutine and a
// bounded queue; when the queue is full the event is dropped for that subscriber and
// counted (Dropped), never waited for.
//
// Subscribe before the first Emit: a late subscription is safe (the subscriber list is
// replaced copy-on-write, so Emit takes no lock) but sees only the events emitted after
// it. A subscriber that panics is recovered; the first panic of each subscriber is
// logged with the event's type and every panic is counted (Panics).
type Bus struct {
	log  *slog.Logger
	subs atomic.Pointer[subscribers]

	mu     sync.Mutex // serialises Subscribe, SubscribeAsync and the start of Close
	closed atomic.Bool
	// emitting counts Emit calls in progress, so that Close can wait until every Emit
	// that got past the closed check has queued its event before the drain begins.
	emitting   atomic.Int64
	closeOnce  sync.Once
	stop       chan struct{} // closed by Close: async subscribers drain and exit
	abandon    chan struct{} // closed when a Close context ends: stop draining
	abandonOne sync.Once
}

type subscribers struct {
	sync   []*subscriber
	async  []*subscriber
	byName map[string]*subscriber
}

type subscriber struct {
	name   string
	fn     func(Event)
	accept func(Event) bool // nil: every event
	queue  chan Event       // async only
	done   chan struct{}    // async only: closed when the goroutine returns

	dropped     atomic.Uint64
	panics      atomic.Uint64
	panicLogged atomic.Bool
}

// SubscribeOption adjusts one subscription.
type SubscribeOption func(*subscriber)

// Filter makes a subscription receive only the events accept returns true for. accept
// runs inline in Emit, so it must be fast and must not block. For an asynchronous
// subscriber it keeps the queue for the events that matter: an event filtered out
// takes no room and is not counted as dropped.
func Filter(accept func(Event) bool) SubscribeOption {
	return func(s *subscriber) { s.accept = accept }
}

// NewBus returns a bus with no subscribers; logger may be nil.
func NewBus(logger *slog.Logger) *Bus {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Bus{log: logger, stop: make(chan struct{}), abandon: make(chan struct{})}
	b.subs.Store(&subscribers{byName: map[string]*subscriber{}})
	return b
}

// Subscribe adds a synchronous subscriber: fn runs inline in every Emit, after the
// synchronous subscribers added before it. It sees every event (unless filtered), so
// it suits counting; it must be fast, must never block, and must be safe for concurrent
// use (every pipeline emits from its own goroutines). Names must be unique.
func (b *Bus) Subscribe(name string, fn func(Event), opts ...SubscribeOption) {
	s := &subscriber{name: name, fn: fn}
	for _, o := range opts {
		o(s)
	}
	b.add(s, false)
}

// SubscribeAsync adds an asynchronous subscriber: fn runs on a goroutine of its own,
// one event at a time in the order the events were queued, fed by a queue of queue events (at least 1).
// When the queue is full the event is dropped for this subscriber and counted by
// Dropped; Emit never waits. Names must be unique. Subscribing after Close does nothing.
func (b *Bus) SubscribeAsync(name string, queue int, fn func(Event), opts ...SubscribeOption) {
	s := &subscriber{name: name, fn: fn, queue: make(chan Event, max(queue, 1)), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	b.add(s, true)
}

func (b *Bus) add(s *subscriber, async bool) {
	if s.fn == nil {
		panic(fmt.Sprintf("events: subscriber %q has no function", s.name))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return
	}
	old := b.subs.Load()
	if _, dup := old.byName[s.name]; dup {
		panic(fmt.Sprintf("events: subscriber %q added twice", s.name))
	}
	next := &subscribers{
		sync:   old.sync,
		async:  old.async,
		byName: make(map[string]*subscriber, len(old.byName)+1),
	}
	for k, v := range old.byName {
		next.byName[k] = v
	}
	next.byName[s.name] = s
	// Full slice expressions: an append never writes into the array an Emit is reading.
	if async {
		next.async = append(old.async[:len(old.async):len(old.async)], s)
		go b.work(s)
	} else {
		next.sync = append(old.sync[:len(old.sync):len(old.sync)], s)
	}
	b.subs.Store(next)
}

// Emit delivers e to every synchronous subscriber, then offers it to every
// asynchronous subscriber's queue without waiting. After Close it does nothing.
func (b *Bus) Emit(e Event) {
	b.emitting.Add(1)
	defer b.emitting.Add(-1)
	if b.closed.Load() {
		return
	}
	subs := b.subs.Load()
	for _, s := range subs.sync {
		if s.accept == nil || s.accept(e) {
			b.call(s, e)
		}
	}
	for _, s := range subs.async {
		if s.accept != nil && !s.accept(e) {
			continue
		}
		select {
		case s.queue <- e:
		default:
			s.dropped.Add(1)
		}
	}
}

// call runs one subscriber on one event, recovering a panic.
func (b *Bus) call(s *subscriber, e Event) {
	defer func() {
		if r := recover(); r != nil {
			s.panics.Add(1)
			if s.panicLogged.CompareAndSwap(false, true) {
				b.log.Error("event subscriber panicked; recovered (further panics of this subscriber are counted, not logged)",
					"subscriber", s.name, "event", fmt.Sprintf("%T", e), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			}
		}
	}()
	s.fn(e)
}

// work is an asynchronous subscriber's goroutine: it handles queued events until Close,
// then drains what is queued unless the Close context ends first; events left behind
// then are counted as dropped.
func (b *Bus) work(s *subscriber) {
	defer close(s.done)
	stopping := false
	for {
		select {
		case <-b.abandon:
			s.dropped.Add(uint64(len(s.queue)))
			return
		default:
		}
		if stopping {
			select {
			case e := <-s.queue:
				b.call(s, e)
			default:
				return // drained
			}
			continue
		}
		select {
		case e := <-s.queue:
			b.call(s, e)
		case <-b.stop:
			stopping = true
		}
	}
}

// Dropped is how many events the asynchronous subscriber name lost because its queue
// was full, or because a Close context ended before they were handled; 0 for a name
// not subscribed.
func (b *Bus) Dropped(name string) uint64 {
	if s, ok := b.subs.Load().byName[name]; ok {
		return s.dropped.Load()
	}
	return 0
}

// Panics is how many times the subscriber name panicked.
func (b *Bus) Panics(name string) uint64 {
	if s, ok := b.subs.Load().byName[name]; ok {
		return s.panics.Load()
	}
	return 0
}

// Close stops accepting events (Emit becomes a no-op) and lets every asynchronous
// subscriber handle what is already queued, waiting until they are done or ctx ends.
// When ctx ends first, each subscriber stops after the event in hand (an event handler
// that never returns keeps its goroutine), the rest is counted as dropped, and Close
// returns an error. Close is idempotent; a later call waits again with its own ctx.
//
// Events emitted after Close began are lost, including those emitted by asynchronous
// subscribers while they drain: stop the loops before closing their bus.
func (b *Bus) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed.Store(true)
		b.mu.Unlock()
		// Every Emit that passed the closed check finishes its sends before the drain
		// starts, so nothing accepted is stranded in a queue nobody reads. Emit never
		// blocks on async subscribers, so this waits only for synchronous ones.
		for pause := time.Microsecond; b.emitting.Load() > 0 && ctx.Err() == nil; pause = min(2*pause, time.Millisecond) {
			time.Sleep(pause)
		}
		close(b.stop)
	})
	for _, s := range b.subs.Load().async {
		select {
		case <-s.done:
		case <-ctx.Done():
			b.abandonOne.Do(func() { close(b.abandon) })
			return fmt.Errorf("close event bus: subscriber %s did not drain its queue: %w", s.name, ctx.Err())
		}
	}
	return nil
}
