package dispatch

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// flowFor is a flow whose lock is always granted (a zero Lock releases as a no-op) and
// which counts its tries.
func flowFor(tries *int, granted bool) *flow {
	return &flow{stream: "s", rate: DefaultFlowRate, log: slog.New(slog.DiscardHandler), emit: discardEmitter{},
		try: func(context.Context, string) (*store.Lock, error) {
			*tries++
			if !granted {
				return nil, nil
			}
			return &store.Lock{}, nil
		}}
}

func TestAFlowStartsAboveItsNotificationRateAndEndsAfterItsLinger(t *testing.T) {
	ctx := context.Background()
	tries := 0
	f := flowFor(&tries, true)
	t0 := time.Unix(1000, 0)
	f.claimed(ctx, t0, 1) // opens the first window

	// 40 notifications in 100 ms is 400 a second: under the default 500, parked.
	for range 40 {
		f.notified()
	}
	f.claimed(ctx, t0.Add(100*time.Millisecond), 3)
	if f.flowing() || tries != 0 {
		t.Fatalf("after 400 notifications/s: flowing %v, %d lock tries; want parked, none", f.flowing(), tries)
	}
	if w := f.wait(t0.Add(100*time.Millisecond), time.Second); w < time.Second/2 {
		t.Fatalf("parked, a pipeline waits %v for news; want its jittered poll interval", w)
	}
	// 60 in the next 100 ms is 600 a second: flowing.
	for range 60 {
		f.notified()
	}
	at := t0.Add(200 * time.Millisecond)
	f.claimed(ctx, at, 2)
	if !f.flowing() || tries != 1 {
		t.Fatalf("after 600 notifications/s: flowing %v, %d lock tries; want flowing, one", f.flowing(), tries)
	}
	if w := f.wait(at, time.Second); w != flowPoll {
		t.Fatalf("flowing, a pipeline waits %v; want %v", w, flowPoll)
	}
	// Empty claims within the linger keep the flow; one past it ends it, and polling
	// goes on for the grace.
	f.claimed(ctx, at.Add(flowLinger), 0)
	if !f.flowing() {
		t.Fatal("the flow ended within its linger")
	}
	end := at.Add(flowLinger + time.Millisecond)
	f.claimed(ctx, end, 0)
	if f.flowing() {
		t.Fatal("the flow outlived its linger")
	}
	if w := f.wait(end.Add(flowGrace-time.Millisecond), time.Second); w != flowPoll {
		t.Fatalf("within the grace after a flow, a pipeline waits %v; want %v", w, flowPoll)
	}
	if w := f.wait(end.Add(flowGrace), time.Second); w < time.Second/2 {
		t.Fatalf("after the grace, a pipeline waits %v; want its poll interval", w)
	}
}

func TestAFlowLockHeldElsewhereIsNotAskedForAgainWithinTheRetry(t *testing.T) {
	ctx := context.Background()
	tries := 0
	f := flowFor(&tries, false)
	t0 := time.Unix(1000, 0)
	f.claimed(ctx, t0, 1)
	for i := 1; i <= 5; i++ { // five busy windows, 100 ms apart
		for range 100 {
			f.notified()
		}
		f.claimed(ctx, t0.Add(time.Duration(i)*flowWindow), 1)
	}
	if f.flowing() || tries != 1 {
		t.Fatalf("flowing %v after %d tries within %v; want parked after one", f.flowing(), tries, flowRetry)
	}
	for range 600 { // the window now spans flowRetry (1 s): 600 a second
		f.notified()
	}
	f.claimed(ctx, t0.Add(5*flowWindow+flowRetry), 1)
	if tries != 2 {
		t.Fatalf("%d tries once the retry passed, want 2", tries)
	}
}
