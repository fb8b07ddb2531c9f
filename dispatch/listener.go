package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// ListenConnectTimeout bounds opening the listening connection.
const ListenConnectTimeout = 10 * time.Second

// Waker is woken when its stream has news.
type Waker interface {
	Stream() string
	Wake()
}

// Listener holds its own connection (store.Listen), LISTENs on the outbox table's channel
// and wakes the pipeline of the stream each notification names. It reconnects with
// backoff and wakes every pipeline after each (re)connect, because notifications sent
// while it was away are lost; polling covers the gap either way.
type Listener struct {
	cfg       ListenerConfig
	wakers    map[string]Waker
	emit      Emitter
	log       *slog.Logger
	connected atomic.Bool
	received  atomic.Uint64
}

// ListenerConfig says what a Listener listens to; zero values take the defaults noted.
type ListenerConfig struct {
	Listen store.ListenConfig // the listener's own connection and the table it listens to
	// Keepalive is how long a quiet connection waits before it is pinged, so that a
	// connection that died silently is noticed (30s).
	Keepalive time.Duration
	// Early, when set, delivers one connection already listening (nil if opening it
	// failed), opened while the dispatcher was being built so that readiness does not
	// wait for it; the first session takes it instead of connecting. Run closes it if
	// it stops before a session took it.
	Early <-chan *store.Notifications
	// EarlyPolled says Early's connection was listening before the shared poll's first
	// poll began, which so finds everything it could have missed: its session does not
	// call Connected.
	EarlyPolled bool
	// FirstPoll, when set with EarlyPolled, is the shared poll's first question, asked
	// on Early's connection by the session that takes it: after the session counts as
	// connected (readiness waits for the LISTEN, not for the poll's answer) and before
	// its first wait, which the notifications committed meanwhile then find queued.
	FirstPoll func(ctx context.Context, conn *store.Notifications)
	// Connected, when set, is called after each (re)connect instead of waking every
	// pipeline: the shared poll (Poller.Kick) then finds the streams whose notifications
	// may have been lost, without a claim per stream.
	Connected func()
}

// NewListener builds a listener waking wakers; emit and logger may be nil.
func NewListener(cfg ListenerConfig, wakers []Waker, emit Emitter, logger *slog.Logger) *Listener {
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 30 * time.Second
	}
	emit, logger = orDiscard(emit, logger)
	byStream := make(map[string]Waker, len(wakers))
	for _, w := range wakers {
		byStream[w.Stream()] = w
	}
	return &Listener{cfg: cfg, wakers: byStream, emit: emit, log: logger.With("component", "listener")}
}

// Connected reports whether the listener currently holds a listening connection.
func (l *Listener) Connected() bool { return l.connected.Load() }

// Received counts notifications received since start.
func (l *Listener) Received() uint64 { return l.received.Load() }

// Run listens until ctx ends.
func (l *Listener) Run(ctx context.Context) error {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		began := time.Now()
		err := l.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if l.connected.Swap(false) || attempt == 1 {
			l.log.Warn("notification listener disconnected; reconnecting (polling continues)", "err", err)
		}
		l.emit.Emit(events.ListenerState{Connected: false, Err: err})
		if time.Since(began) > time.Minute {
			attempt = 1 // a long healthy session resets the backoff
		}
		t := time.NewTimer(backoff(100*time.Millisecond, 5*time.Second, attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	l.connected.Store(false)
	if conn := l.early(); conn != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}
	return nil
}

// early takes the connection of ListenerConfig.Early, once: nil when there is none, it
// failed, or it was taken already.
func (l *Listener) early() *store.Notifications {
	if l.cfg.Early == nil {
		return nil
	}
	conn := <-l.cfg.Early
	l.cfg.Early = nil
	return conn
}

// session connects, listens and wakes pipelines until the connection fails or ctx ends.
// The connection is closed only here, after Wait has returned: closing
// it under a waiting goroutine would race.
func (l *Listener) session(ctx context.Context) error {
	polled := l.cfg.EarlyPolled
	conn := l.early()
	if conn == nil {
		polled = false
		connectCtx, cancel := context.WithTimeout(ctx, ListenConnectTimeout)
		var err error
		conn, err = store.Listen(connectCtx, l.cfg.Listen)
		cancel()
		if err != nil {
			return fmt.Errorf("listener: %w", err)
		}
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	l.connected.Store(true)
	l.emit.Emit(events.ListenerState{Connected: true})
	l.log.Info("listening for new messages", "channel", conn.Channel())
	switch {
	case polled && l.cfg.FirstPoll != nil:
		first := l.cfg.FirstPoll
		l.cfg.FirstPoll = nil
		first(ctx, conn) // after LISTEN, so nothing is missed
	case polled: // the shared poll's first poll began after LISTEN: nothing was missed
	case l.cfg.Connected != nil:
		l.cfg.Connected()
	default:
		for _, w := range l.wakers {
			w.Wake()
		}
	}
	for {
		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.Keepalive)
		stream, err := conn.Wait(waitCtx)
		quiet := errors.Is(waitCtx.Err(), context.DeadlineExceeded)
		cancel()
		switch {
		case err == nil:
			l.received.Add(1)
			if w, ok := l.wakers[stream]; ok {
				w.Wake()
			}
		case ctx.Err() != nil:
			return nil
		case quiet:
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("listener: keepalive: %w", err)
			}
		default:
			return fmt.Errorf("listener: wait for notification: %w", err)
		}
	}
}
