package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/store"
)

// TestAPollAwaitingItsPrimeAsksNothingUntilTheAnswerComesOrItsTimeoutPasses: after
// AwaitPrime the first poll's answer comes from PrimeWith, asked on the listener's
// connection while Run already runs; Run must not ask the general pool at the same time
// (the first /readyz wants its connection), and must not wait for ever for an answer
// that never comes.
func TestAPollAwaitingItsPrimeAsksNothingUntilTheAnswerComesOrItsTimeoutPasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(*dispatch.Poller)
		runFor time.Duration
		want   int64
	}{
		{"an answer in time is the first poll", func(p *dispatch.Poller) { p.PrimeWith(map[string]bool{}, nil) }, 300 * time.Millisecond, 0},
		{"a failed answer makes Run poll at once", func(p *dispatch.Poller) { p.PrimeWith(nil, errors.New("no answer")) }, 300 * time.Millisecond, 1},
		{"no answer at all makes Run poll once PrimeTimeout passed", func(*dispatch.Poller) {}, dispatch.PrimeTimeout + time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			due := &countingDue{}
			p := dispatch.NewPoller(time.Hour, due, nil, nil)
			p.AwaitPrime()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = p.Run(ctx); close(done) }()
			time.Sleep(100 * time.Millisecond)
			if n := due.asked.Load(); n != 0 {
				t.Fatalf("asked %d times before the answer came; want 0", n)
			}
			tc.answer(p)
			time.Sleep(tc.runFor)
			cancel()
			<-done
			if n := due.asked.Load(); n != tc.want {
				t.Errorf("asked %d times; want %d", n, tc.want)
			}
			select {
			case <-p.Primed():
			default:
				t.Error("Primed is still open after the first poll's answer")
			}
		})
	}
}

// TestRunsOwnFirstPollIsTheStartsAnswerToo: without Prime, Run's first poll is the one
// that says whether the start met messages to deliver (startpages.go waits for it).
func TestRunsOwnFirstPollIsTheStartsAnswerToo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := dispatch.NewPoller(time.Hour, f.store, nil, nil)
	select {
	case <-p.Primed():
		t.Fatal("Primed closed before any poll")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	select {
	case <-p.Primed():
	case <-time.After(5 * time.Second):
		t.Fatal("Primed still open 5s after Run began")
	}
}

// TestTheListenersFirstPollRunsOnItsEarlyConnectionOnceItCountsAsConnected: readiness
// (Connected) does not wait for the shared poll's first answer, the answer is asked on
// the connection that LISTENed before it, and a notification that arrives meanwhile is
// not lost: the session's first wait finds it queued.
func TestTheListenersFirstPollRunsOnItsEarlyConnectionOnceItCountsAsConnected(t *testing.T) {
	t.Parallel()
	f, a, asked, listen := askingListener(t)
	conn, early := earlyListening(t, f, listen)
	var l *dispatch.Listener
	polling, release := make(chan bool, 1), make(chan struct{})
	var polledOn *store.Notifications
	l = dispatch.NewListener(dispatch.ListenerConfig{Listen: listen, Early: early, EarlyPolled: true,
		Connected: func() { asked <- struct{}{} },
		FirstPoll: func(ctx context.Context, n *store.Notifications) {
			polledOn = n
			polling <- l.Connected()
			<-release
		}}, []dispatch.Waker{a}, newRecorder(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case connected := <-polling:
		if !connected {
			t.Error("the first poll began before the listener counted as connected")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the listener never asked the first poll")
	}
	if polledOn != conn {
		t.Error("the first poll was asked on another connection than the early one")
	}
	f.insert(t, "a", 1) // while the first poll runs: its notification waits on the connection
	close(release)
	select {
	case <-a.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the insert made during the first poll never woke its stream")
	}
	select {
	case <-asked:
		t.Fatal("the listener asked for another poll although it asked the first on its connection")
	case <-time.After(200 * time.Millisecond):
	}
}
