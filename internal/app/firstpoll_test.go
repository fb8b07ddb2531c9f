package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestTheStartIsReadyWhileItsFirstPollWaits: the shared poll's first question is asked
// on the listener's connection after its LISTEN, and the start does not wait for the
// answer: with the outbox table locked (a migration holding it, say), the dispatcher
// is built and its listener connected while that question waits on the lock; once the
// lock goes, the answer wakes the pipeline of the row committed before the start (the
// streams poll once an hour, so nothing else could). Before, the start waited for the
// answer, up to PrimeTimeout.
func TestTheStartIsReadyWhileItsFirstPollWaits(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	cfg := startConfig(t, pg, pg.DSN)
	s := cfg.Streams["s"]
	s.PollInterval = time.Hour
	cfg.Streams["s"] = s
	var id int64
	must(t, pg.Pool.QueryRow(t.Context(), `INSERT INTO `+pg.Table.String()+
		` (stream, topic, key, payload) VALUES ('s', 'orders', 'k', '{}') RETURNING id`).Scan(&id))

	lock, err := pg.Pool.Begin(t.Context())
	must(t, err)
	defer func() { _ = lock.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = lock.Exec(t.Context(), `LOCK TABLE `+pg.Table.String()+` IN ACCESS EXCLUSIVE MODE`)
	must(t, err)

	type built struct {
		d   *Dispatcher
		err error
	}
	out := make(chan built, 1)
	go func() {
		d, err := NewDispatcher(t.Context(), cfg, slog.New(slog.DiscardHandler), Options{})
		out <- built{d, err}
	}()
	var b built
	select {
	case b = <-out:
		must(t, b.err)
	case <-time.After(4 * time.Second): // PrimeTimeout is 5s
		t.Fatal("the dispatcher was not built within 4s while its table was locked: the start waits for the first poll")
	}
	d := b.d
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		must(t, <-done)
	}()
	eventually(t, 5*time.Second, "the listener connected while the first poll waits on the lock", d.ListenerConnected)
	must(t, lock.Rollback(t.Context()))
	eventually(t, 5*time.Second, "the row committed before the start delivered on the first poll's answer", func() bool {
		var status string
		must(t, pg.Pool.QueryRow(t.Context(), `SELECT status FROM `+pg.Table.String()+` WHERE id = $1`, id).Scan(&status))
		return status == "delivered"
	})
}
