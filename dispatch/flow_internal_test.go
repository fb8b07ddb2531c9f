package dispatch

import (
	"context"
	"log/slog"
	"slices"
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

	// 40 notifications in 100 ms is 400 a second, each claim finding one message (one
	// producer at a time): under the default 500, parked.
	for range 40 {
		f.notified()
	}
	f.claimed(ctx, t0.Add(100*time.Millisecond), 1)
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

func TestAFlowStartsBelowItsRateOnlyWhenClaimsFindSeveralMessages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		notes   int   // notifications in the 100 ms window
		claims  []int // messages each claim of the window found
		flowing bool
	}{
		{"producers committing at once, heard at 200 a second, flow", 20, []int{1, 2, 1, 1, 3, 1, 1, 2, 1, 1, 1, 1, 1, 2, 1}, true},
		{"one producer at a time at 260 a second stays parked", 26, slices.Repeat([]int{1}, 26), false},
		{"producers committing at once at 100 a second, under a quarter of the rate, stay parked", 10, []int{2, 3, 1, 2, 2}, false},
		{"a backlog drained in full batches without notifications stays parked", 0, []int{100, 100, 100}, false},
		{"600 a second one at a time flow, as before", 60, slices.Repeat([]int{1}, 60), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tries := 0
			f := flowFor(&tries, true)
			t0 := time.Unix(1000, 0)
			f.claimed(ctx, t0, 0) // opens the window
			for range tc.notes {
				f.notified()
			}
			for i, n := range tc.claims {
				f.claimed(ctx, t0.Add(time.Duration(i+1)*time.Millisecond), n)
			}
			f.claimed(ctx, t0.Add(flowWindow), 1)
			if f.flowing() != tc.flowing {
				t.Fatalf("flowing %v after %d notifications and claims %v in %v; want %v", f.flowing(), tc.notes, tc.claims, flowWindow, tc.flowing)
			}
		})
	}
}

func TestAFlowEndsWhenASecondOfItsClaimsFindsUnderAnEighthOfItsRate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		every   time.Duration // one message claimed this often, within the linger
		flowing bool          // after two seconds
	}{
		{"a message every 20 ms (50 a second, under 62.5) ends the flow", 20 * time.Millisecond, false},
		{"a message every 10 ms (100 a second) keeps it", 10 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tries := 0
			f := flowFor(&tries, true)
			t0 := time.Unix(1000, 0)
			f.claimed(ctx, t0, 0)
			for range 60 {
				f.notified()
			}
			f.claimed(ctx, t0.Add(flowWindow), 1)
			if !f.flowing() {
				t.Fatal("600 notifications a second did not start a flow")
			}
			at := t0.Add(flowWindow)
			for at.Before(t0.Add(flowWindow + 2*time.Second)) {
				at = at.Add(tc.every)
				f.claimed(ctx, at, 1)
			}
			if f.flowing() != tc.flowing {
				t.Fatalf("flowing %v after two seconds of a message every %v; want %v", f.flowing(), tc.every, tc.flowing)
			}
			if !tc.flowing {
				if w := f.wait(at.Add(flowGrace), time.Second); w < time.Second/2 {
					t.Fatalf("after a flow ended for its rate, a pipeline waits %v; want its poll interval", w)
				}
			}
		})
	}
}
