package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

type fakeWaker struct {
	stream string
	woken  chan struct{}
}

func (w *fakeWaker) Stream() string { return w.stream }
func (w *fakeWaker) Wake() {
	select {
	case w.woken <- struct{}{}:
	default:
	}
}

func startListener(t *testing.T, f *fixture, rec *recorder, wakers ...dispatch.Waker) {
	t.Helper()
	cfg, err := pgx.ParseConfig(f.pg.DSN)
	must(t, err)
	l := dispatch.NewListener(dispatch.ListenerConfig{Listen: store.ListenConfig{Conn: cfg, Table: f.pg.Table}}, wakers, rec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rec.await(t, 10*time.Second, "the listener connecting", func(e events.Event) bool {
		s, ok := e.(events.ListenerState)
		return ok && s.Connected
	})
}

func TestANotificationWakesOnlyThePipelineOfItsStream(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := &fakeWaker{stream: "a", woken: make(chan struct{}, 1)}
	b := &fakeWaker{stream: "b", woken: make(chan struct{}, 1)}
	startListener(t, f, newRecorder(), a, b)
	<-a.woken // every pipeline is woken on connect
	<-b.woken

	f.insert(t, "a", 3)
	select {
	case <-a.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("stream a was not woken by its insert")
	}
	f.insert(t, "b", 1) // a marker: once b is woken, a's notification has long been handled
	select {
	case <-b.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("stream b was not woken by its insert")
	}
	select {
	case <-a.woken:
		t.Fatal("stream a was woken by an insert into stream b")
	default:
	}
}

func TestWithAOneMinutePollANotifiedRowIsDeliveredInSecondsEvenAfterTheListenerIsKilled(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pub := newFakePublisher(nil)
	p := pipeline(t, f, dispatch.PipelineConfig{PollInterval: time.Minute}, pub, nil)
	rec := newRecorder()
	startListener(t, f, rec, p)
	run(t, p)

	deliver := func(what string) {
		t.Helper()
		id := f.insert(t, "orders", 1)[0]
		deadline := time.After(3 * time.Second)
		for {
			select {
			case got := <-pub.announce:
				if got == id {
					return
				}
			case <-deadline:
				t.Fatalf("%s: row %d not delivered within 3s with a one-minute poll", what, id)
			}
		}
	}
	deliver("with the listener connected")

	var killed bool
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+f.pg.Table.ListenChannel()).Scan(&killed))
	if !killed {
		t.Fatal("the listener's backend was not found")
	}
	rec.await(t, 10*time.Second, "the listener noticing", func(e events.Event) bool {
		s, ok := e.(events.ListenerState)
		return ok && !s.Connected
	})
	rec.await(t, 10*time.Second, "the listener reconnecting", func(e events.Event) bool {
		s, ok := e.(events.ListenerState)
		return ok && s.Connected
	})
	deliver("after the listener's connection was killed")
}

func TestAListenerTakesTheConnectionOpenedAheadOfItInsteadOfConnecting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	good, err := pgx.ParseConfig(f.pg.DSN)
	must(t, err)
	conn, err := store.Listen(context.Background(), store.ListenConfig{Conn: good, Table: f.pg.Table})
	must(t, err)
	// Its own connection could never open: only the one opened ahead can listen.
	nowhere, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	must(t, err)
	early := make(chan *store.Notifications, 1)
	early <- conn
	a := &fakeWaker{stream: "a", woken: make(chan struct{}, 1)}
	rec := newRecorder()
	l := dispatch.NewListener(dispatch.ListenerConfig{Listen: store.ListenConfig{Conn: nowhere, Table: f.pg.Table}, Early: early},
		[]dispatch.Waker{a}, rec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rec.await(t, 10*time.Second, "the listener connecting", func(e events.Event) bool {
		s, ok := e.(events.ListenerState)
		return ok && s.Connected
	})
	<-a.woken // on connect
	f.insert(t, "a", 1)
	select {
	case <-a.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the insert did not wake its stream through the connection opened ahead")
	}
}

func TestAListenerStoppedBeforeItsFirstSessionClosesTheConnectionOpenedAhead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cfg, err := pgx.ParseConfig(f.pg.DSN)
	must(t, err)
	listen := store.ListenConfig{Conn: cfg, Table: f.pg.Table}
	conn, err := store.Listen(context.Background(), listen)
	must(t, err)
	early := make(chan *store.Notifications, 1)
	early <- conn
	l := dispatch.NewListener(dispatch.ListenerConfig{Listen: listen, Early: early}, nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stopped before it began
	_ = l.Run(ctx)
	if err := conn.Ping(context.Background()); err == nil {
		_ = conn.Close(context.Background())
		t.Fatal("the connection opened ahead is still open after the listener stopped")
	}
}
