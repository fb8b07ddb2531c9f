package events_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/events"
)

// seq is an event carrying its emission number.
func seq(i int) events.Event { return events.Iteration{Claimed: i} }

func number(e events.Event) int { return e.(events.Iteration).Claimed }

func TestSynchronousSubscribersSeeEveryEventInOrderOfSubscription(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	var calls []string // appended inline by Emit: no lock needed on this goroutine
	var got [2][]int
	bus.Subscribe("first", func(e events.Event) {
		calls = append(calls, "first")
		got[0] = append(got[0], number(e))
	})
	bus.Subscribe("second", func(e events.Event) {
		calls = append(calls, "second")
		got[1] = append(got[1], number(e))
	})
	const n = 1000
	for i := range n {
		bus.Emit(seq(i))
	}
	for s := range got {
		if len(got[s]) != n {
			t.Fatalf("subscriber %d saw %d events, want %d", s, len(got[s]), n)
		}
		for i, v := range got[s] {
			if v != i {
				t.Fatalf("subscriber %d: event %d is %d", s, i, v)
			}
		}
	}
	for i := 0; i < len(calls); i += 2 {
		if calls[i] != "first" || calls[i+1] != "second" {
			t.Fatalf("calls %d and %d: %s, %s; want first, second", i, i+1, calls[i], calls[i+1])
		}
	}
	if d := bus.Dropped("first"); d != 0 {
		t.Fatalf("a synchronous subscriber dropped %d events", d)
	}
}

func TestAnAsynchronousSubscriberSeesEventsInOrder(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	const n = 500
	got := make(chan int, n)
	bus.SubscribeAsync("async", n, func(e events.Event) { got <- number(e) })
	for i := range n {
		bus.Emit(seq(i))
	}
	for i := range n {
		if v := <-got; v != i {
			t.Fatalf("event %d is %d", i, v)
		}
	}
	if d := bus.Dropped("async"); d != 0 {
		t.Fatalf("dropped %d with room for every event", d)
	}
}

func TestABlockedAsynchronousSubscriberNeitherSlowsEmitNorLosesCountOfItsDrops(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	const queue, emitted = 64, 100_000
	taken := make(chan int, 1) // the event the subscriber holds while blocked
	release := make(chan struct{})
	var handled atomic.Int64
	bus.SubscribeAsync("slow", queue, func(e events.Event) {
		if handled.Add(1) == 1 {
			taken <- number(e)
			<-release
		}
	})
	var counted int
	bus.Subscribe("count", func(events.Event) { counted++ })

	// The first event is taken and blocks the subscriber before anything else is sent,
	// so exactly one event left the queue before it filled.
	bus.Emit(seq(0))
	if first := <-taken; first != 0 {
		t.Fatalf("the subscriber took event %d first", first)
	}
	emitDone := make(chan struct{})
	go func() {
		defer close(emitDone)
		for i := 1; i < emitted; i++ {
			bus.Emit(seq(i))
		}
	}()
	select {
	case <-emitDone:
	case <-time.After(30 * time.Second):
		t.Fatal("Emit did not return while an asynchronous subscriber was blocked")
	}
	if handled.Load() != 1 {
		t.Fatalf("the blocked subscriber handled %d events", handled.Load())
	}
	if counted != emitted {
		t.Fatalf("the synchronous subscriber saw %d events, want %d", counted, emitted)
	}
	if d, want := bus.Dropped("slow"), uint64(emitted-queue-1); d != want {
		t.Fatalf("dropped %d, want %d (emitted %d, queue %d, 1 taken before blocking)", d, want, emitted, queue)
	}

	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := handled.Load(); got != queue+1 {
		t.Fatalf("handled %d events after release, want the %d queued plus the one taken", got, queue)
	}
}

func TestCloseDrainsQueuedEventsAndThenIgnoresEmit(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	const n = 200
	release := make(chan struct{})
	var got []int
	var mu sync.Mutex
	bus.SubscribeAsync("async", n, func(e events.Event) {
		<-release
		mu.Lock()
		got = append(got, number(e))
		mu.Unlock()
	})
	var syncSeen int
	bus.Subscribe("sync", func(events.Event) { syncSeen++ })
	for i := range n {
		bus.Emit(seq(i))
	}
	closed := make(chan error, 1)
	go func() { closed <- bus.Close(context.Background()) }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != n {
		t.Fatalf("Close returned after %d of %d queued events were handled", len(got), n)
	}
	mu.Unlock()

	bus.Emit(seq(n)) // after Close: nobody hears it
	if syncSeen != n {
		t.Fatalf("the synchronous subscriber saw %d events, want %d (none after Close)", syncSeen, n)
	}
	if err := bus.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCloseGivesUpWhenItsContextEndsAndCountsWhatWasLeft(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	const queued = 10
	started := make(chan struct{})
	release := make(chan struct{})
	var handled atomic.Int64
	bus.SubscribeAsync("stuck", queued+1, func(e events.Event) {
		if handled.Add(1) == 1 {
			close(started)
			<-release
		}
	})
	bus.Emit(seq(0))
	<-started
	for i := 1; i <= queued; i++ {
		bus.Emit(seq(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := bus.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with an ended context: %v", err)
	}
	close(release)
	// The subscriber stops after the event in hand; the rest is counted as dropped.
	if err := bus.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 1 || bus.Dropped("stuck") != queued {
		t.Fatalf("handled %d, dropped %d; want 1 and %d", handled.Load(), bus.Dropped("stuck"), queued)
	}
}

func TestAPanickingSubscriberIsRecoveredCountedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	var logs safeBuffer
	bus := events.NewBus(slog.New(slog.NewJSONHandler(&logs, nil)))
	var after int
	bus.Subscribe("broken", func(e events.Event) {
		if _, ok := e.(events.ClaimFailed); ok {
			panic("metrics label missing")
		}
	})
	bus.Subscribe("after", func(events.Event) { after++ })
	asyncDone := make(chan struct{}, 10)
	bus.SubscribeAsync("broken-async", 10, func(e events.Event) {
		defer func() { asyncDone <- struct{}{} }()
		panic("async boom")
	})
	for range 3 {
		bus.Emit(events.ClaimFailed{Stream: "orders"})
	}
	bus.Emit(events.Iteration{})
	for range 4 {
		<-asyncDone
	}
	if err := bus.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after != 4 {
		t.Fatalf("the subscriber after the panicking one saw %d of 4 events", after)
	}
	if p := bus.Panics("broken"); p != 3 {
		t.Fatalf("counted %d panics of the synchronous subscriber, want 3", p)
	}
	if p := bus.Panics("broken-async"); p != 4 {
		t.Fatalf("counted %d panics of the asynchronous subscriber, want 4", p)
	}
	out := logs.String()
	if n := strings.Count(out, `"subscriber":"broken"`); n != 1 {
		t.Fatalf("the synchronous subscriber's panic was logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, `"subscriber":"broken-async"`); n != 1 {
		t.Fatalf("the asynchronous subscriber's panic was logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, `"event":"events.ClaimFailed"`) || !strings.Contains(out, "metrics label missing") {
		t.Fatalf("the log does not name the event type and the panic:\n%s", out)
	}
}

func TestAFilteredSubscriberOnlySeesAndQueuesWhatItAccepts(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	onlyFailed := events.Filter(func(e events.Event) bool { _, ok := e.(events.MessageFailed); return ok })
	release := make(chan struct{})
	var got atomic.Int64
	bus.SubscribeAsync("failed-only", 2, func(events.Event) { <-release; got.Add(1) }, onlyFailed)
	var syncGot int
	bus.Subscribe("failed-only-sync", func(events.Event) { syncGot++ }, onlyFailed)
	for range 1000 {
		bus.Emit(events.Iteration{})
	}
	bus.Emit(events.MessageFailed{ID: 1})
	bus.Emit(events.MessageFailed{ID: 2})
	close(release)
	if err := bus.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 2 || syncGot != 2 || bus.Dropped("failed-only") != 0 {
		t.Fatalf("async got %d, sync got %d, dropped %d; want 2, 2, 0", got.Load(), syncGot, bus.Dropped("failed-only"))
	}
}

func TestALateSubscriberSeesLaterEventsWhileOthersEmit(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	var early atomic.Int64
	bus.Subscribe("early", func(events.Event) { early.Add(1) })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					bus.Emit(events.Iteration{})
				}
			}
		}()
	}
	var late atomic.Int64
	for i := range 20 {
		bus.Subscribe("late-"+string(rune('a'+i)), func(events.Event) { late.Add(1) })
	}
	seen := make(chan struct{}, 1)
	bus.SubscribeAsync("late-async", 1, func(events.Event) {
		select {
		case seen <- struct{}{}:
		default:
		}
	})
	<-seen
	close(stop)
	wg.Wait()
	if err := bus.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if early.Load() == 0 || late.Load() == 0 {
		t.Fatalf("early saw %d, late saw %d", early.Load(), late.Load())
	}
}

func TestSubscribingTwiceUnderOneNamePanics(t *testing.T) {
	t.Parallel()
	bus := events.NewBus(nil)
	bus.Subscribe("metrics", func(events.Event) {})
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a second subscriber named metrics was accepted")
		}
	}()
	bus.SubscribeAsync("metrics", 1, func(events.Event) {})
}

// BenchmarkEmit emits to one synchronous counting subscriber and one asynchronous
// subscriber that counts too. "boxed" emits an event already held in an Event (the cost
// of the bus alone); "iteration" builds an Iteration per call as a pipeline does, so
// its allocation is the caller's conversion to the interface. A tight loop outruns the
// asynchronous subscriber, so most events take the cheaper drop path (dropped/op says
// how many); "boxed-queued" gives it a queue of 1<<21 so that every event up to that
// many is queued. Run with a fixed count of at most that, e.g. -benchtime=2000000x.
func BenchmarkEmit(b *testing.B) {
	setup := func(queue int) *events.Bus {
		bus := events.NewBus(nil)
		var syncCount int64
		bus.Subscribe("count", func(events.Event) { syncCount++ })
		var asyncCount atomic.Int64
		bus.SubscribeAsync("async", queue, func(events.Event) { asyncCount.Add(1) })
		return bus
	}
	done := func(b *testing.B, bus *events.Bus) {
		b.StopTimer()
		b.ReportMetric(float64(bus.Dropped("async"))/float64(b.N), "dropped/op")
		if err := bus.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	var ev events.Event = events.Iteration{Stream: "orders", Claimed: 100, Published: 100}
	b.Run("boxed", func(b *testing.B) {
		bus := setup(1024)
		b.ReportAllocs()
		for b.Loop() {
			bus.Emit(ev)
		}
		done(b, bus)
	})
	b.Run("boxed-queued", func(b *testing.B) {
		bus := setup(1 << 21)
		b.ReportAllocs()
		for b.Loop() {
			bus.Emit(ev)
		}
		done(b, bus)
	})
	b.Run("iteration", func(b *testing.B) {
		bus := setup(1024)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			bus.Emit(events.Iteration{Stream: "orders", Claimed: i, Published: i})
		}
		done(b, bus)
	})
}

// safeBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
