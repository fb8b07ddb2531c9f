package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// TestTheSharedPollAloneDeliversEveryMessageOfManyStreams runs forty pipelines that
// never poll on their own within the test (Polled: their backstop is a minute) and no
// listener: only the shared poll wakes them. Messages arrive in waves, from producers
// running at the same time, after the pipelines' first claims found nothing; every third
// message is refused on its first attempt, so it waits its backoff (available_at in the
// future) and must be woken again when due. Every message must come out, and every row
// end delivered.
func TestTheSharedPollAloneDeliversEveryMessageOfManyStreams(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var mu sync.Mutex
	attempts := map[int64]int{}
	pub := newFakePublisher(func(_ context.Context, m router.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[m.ID]++
		if m.ID%3 == 0 && attempts[m.ID] == 1 {
			return router.Retryable(errRefused)
		}
		return nil
	})
	const streams, waves, perWave = 40, 4, 5
	var pipes []*dispatch.Pipeline
	for i := range streams {
		pipes = append(pipes, pipeline(t, f, dispatch.PipelineConfig{Stream: fmt.Sprintf("s%02d", i), Polled: true,
			BatchSize: 4, BackoffInitial: 30 * time.Millisecond, BackoffMax: 100 * time.Millisecond}, pub, nil))
	}
	for _, p := range pipes {
		run(t, p)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	poller := dispatch.NewPoller(20*time.Millisecond, f.store, pipes, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = poller.Run(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(100 * time.Millisecond) // the pipelines' first claims have found nothing
	var wg sync.WaitGroup
	var all sync.Map
	for w := range waves {
		for i := range streams {
			wg.Go(func() {
				for _, id := range f.insert(t, fmt.Sprintf("s%02d", i), perWave) {
					all.Store(id, true)
				}
			})
		}
		wg.Wait()
		_ = w
		time.Sleep(30 * time.Millisecond)
	}
	total := streams * waves * perWave
	waitFor(t, 20*time.Second, "every row delivered", func() bool { return f.counts(t)["delivered"] == total })
	confirmed := pub.confirmedIDs()
	missing := 0
	all.Range(func(k, _ any) bool {
		if confirmed[k.(int64)] == 0 {
			missing++
		}
		return true
	})
	if missing > 0 || len(confirmed) != total {
		t.Fatalf("%d of %d messages never confirmed, %d confirmed ids", missing, total, len(confirmed))
	}
	retried := 0
	for id, n := range attempts {
		if id%3 == 0 && n >= 2 {
			retried++
		}
	}
	if retried == 0 {
		t.Fatal("no message was retried after its backoff: the test injected no failure")
	}
}

// TestAReconnectedListenerAsksTheSharedPollInsteadOfWakingEveryPipeline: with a
// Connected hook, connecting calls it and wakes no pipeline; a notification still wakes
// its own.
func TestAReconnectedListenerAsksTheSharedPollInsteadOfWakingEveryPipeline(t *testing.T) {
	t.Parallel()
	f, a, asked, listen := askingListener(t)
	rec := newRecorder()
	l := dispatch.NewListener(dispatch.ListenerConfig{Listen: listen,
		Connected: func() { asked <- struct{}{} }}, []dispatch.Waker{a}, rec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener connected without asking for a poll")
	}
	f.insert(t, "a", 1)
	select {
	case <-a.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("stream a was not woken by its insert")
	}
	select {
	case <-a.woken:
		t.Fatal("stream a was woken twice for one insert: the connect woke it too")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestAListenerWhoseEarlyConnectionListenedBeforeTheFirstPollAsksForNoPollUntilItReconnects:
// the start's listening connection LISTENed before the shared poll's first poll, which so
// found everything; asking for another poll at once would only take the general pool's
// connection from the first /readyz. A reconnect still asks: notifications sent while it
// was away are lost.
func TestAListenerWhoseEarlyConnectionListenedBeforeTheFirstPollAsksForNoPollUntilItReconnects(t *testing.T) {
	t.Parallel()
	f, a, asked, listen := askingListener(t)
	_, early := earlyListening(t, f, listen)
	l := dispatch.NewListener(dispatch.ListenerConfig{Listen: listen, Early: early, EarlyPolled: true,
		Connected: func() { asked <- struct{}{} }}, []dispatch.Waker{a}, newRecorder(), nil)
	f.insert(t, "a", 1) // after LISTEN, before Run: the notification waits on the connection
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-a.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("stream a was not woken by its insert")
	}
	select {
	case <-asked:
		t.Fatal("the listener asked for a poll on a connection that listened before the first poll")
	case <-time.After(200 * time.Millisecond):
	}
	var killed bool
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+f.pg.Table.ListenChannel()).Scan(&killed))
	if !killed {
		t.Fatal("the listener's backend was not found")
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener reconnected without asking for a poll")
	}
}

// askingListener is what the listener tests that watch Connected start from: a
// fixture, a waker of stream a, a channel for Connected to signal on, and how to listen
// on the fixture's table.
func askingListener(t *testing.T) (*fixture, *fakeWaker, chan struct{}, store.ListenConfig) {
	t.Helper()
	f := setup(t)
	cfg, err := pgx.ParseConfig(f.pg.DSN)
	must(t, err)
	return f, &fakeWaker{stream: "a", woken: make(chan struct{}, 1)}, make(chan struct{}, 1),
		store.ListenConfig{Conn: cfg, Table: f.pg.Table}
}

// earlyListening opens a listening connection as the start hands one to the listener
// (ListenerConfig.Early), and returns it with the channel that holds it.
func earlyListening(t *testing.T, f *fixture, listen store.ListenConfig) (*store.Notifications, chan *store.Notifications) {
	t.Helper()
	conn, err := store.Listen(f.ctx, listen)
	must(t, err)
	early := make(chan *store.Notifications, 1)
	early <- conn
	return conn, early
}

// countingDue is a DueFinder that counts its questions and finds nothing due; with hang
// set it answers only when its context ends, as a query on a locked table would.
type countingDue struct {
	asked atomic.Int64
	hang  bool
}

func (c *countingDue) DueStreams(ctx context.Context) (map[string]bool, error) {
	c.asked.Add(1)
	if c.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return map[string]bool{}, nil
}

func (c *countingDue) TTL(string) time.Duration { return 0 }

// TestAPrimedSharedPollWaitsItsIntervalBeforeItPollsAgain: the poll the start made
// before the dispatching line (Prime) is the first; Run does not repeat it at once,
// while the process answers its first /readyz on the same pool.
func TestAPrimedSharedPollWaitsItsIntervalBeforeItPollsAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		prime func(*dispatch.Poller)
		want  int64
	}{
		{"a primed poll asks once before Run and not again within its interval",
			func(p *dispatch.Poller) { p.Prime(context.Background()) }, 1},
		{"an unprimed poll asks as soon as it runs", func(*dispatch.Poller) {}, 1},
		{"a poll primed with an answer asked elsewhere does not ask within its interval",
			func(p *dispatch.Poller) { p.PrimeWith(map[string]bool{}, nil) }, 0},
		{"a poll primed with a failed answer asks as soon as it runs",
			func(p *dispatch.Poller) { p.PrimeWith(nil, errors.New("no answer")) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due := &countingDue{}
			p := dispatch.NewPoller(time.Hour, due, nil, nil)
			tc.prime(p)
			runFor(p, 200*time.Millisecond)
			if n := due.asked.Load(); n != tc.want {
				t.Errorf("asked %d times; want %d", n, tc.want)
			}
		})
	}
}

// TestAPrimeThatGetsNoAnswerGivesUpAndRunPollsAtOnce: a start waits for Prime, so a
// first poll that hangs (its table locked by a migration) must not hold the start for
// the poll's interval, here an hour; Run then polls at once.
func TestAPrimeThatGetsNoAnswerGivesUpAndRunPollsAtOnce(t *testing.T) {
	t.Parallel()
	due := &countingDue{hang: true}
	p := dispatch.NewPoller(time.Hour, due, nil, nil)
	primed := make(chan struct{})
	go func() { p.Prime(context.Background()); close(primed) }()
	select {
	case <-primed:
	case <-time.After(15 * time.Second):
		t.Fatal("Prime still waiting for an answer after 15s, with an hour's poll interval")
	}
	runFor(p, 200*time.Millisecond)
	if n := due.asked.Load(); n != 2 {
		t.Errorf("asked %d times; want 2 (Prime, then Run at once)", n)
	}
}

// runFor runs p for d, then stops it and waits for Run to return.
func runFor(p *dispatch.Poller, d time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	time.Sleep(d)
	cancel()
	<-done
}

// TestAFirstPollSaysWhetherTheStartMetMessagesToDeliver: outboxd lets go of its start's
// pages at once only when the start met messages (startpages.go); PrimeWoke tells it.
func TestAFirstPollSaysWhetherTheStartMetMessagesToDeliver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pub := newFakePublisher(func(context.Context, router.Message) error { return nil })
	var pipes []*dispatch.Pipeline
	for _, s := range []string{"a", "b"} {
		pipes = append(pipes, pipeline(t, f, dispatch.PipelineConfig{Stream: s, Polled: true}, pub, nil))
	}
	for _, tc := range []struct {
		name  string
		prime func(*dispatch.Poller)
		want  bool
	}{
		{"an empty table wakes nothing", func(p *dispatch.Poller) { p.Prime(f.ctx) }, false},
		{"a message of one stream wakes its pipeline", func(p *dispatch.Poller) {
			f.insert(t, "a", 1)
			p.Prime(f.ctx)
		}, true},
		{"an answer asked elsewhere counts the same", func(p *dispatch.Poller) { p.PrimeWith(map[string]bool{"b": true}, nil) }, true},
		{"an answer naming only pending rows not yet due wakes nothing", func(p *dispatch.Poller) {
			p.PrimeWith(map[string]bool{"b": false}, nil)
		}, false},
		{"a failed answer wakes every pipeline", func(p *dispatch.Poller) { p.PrimeWith(nil, errors.New("no answer")) }, true},
	} {
		p := dispatch.NewPoller(time.Hour, f.store, pipes, nil)
		tc.prime(p)
		if got := p.PrimeWoke(); got != tc.want {
			t.Errorf("%s: PrimeWoke %v; want %v", tc.name, got, tc.want)
		}
	}
}
