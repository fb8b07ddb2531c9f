package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

// TestInsertsOfAFlowingStreamDoNotNotifyAndNotifyAgainOnceItsLockIsReleased holds the
// flow lock of one stream and reads the notifications of inserts into it and into
// another. Notifications arrive in commit order, so if the flowing stream's insert had
// notified, its notification would come before the other stream's.
func TestInsertsOfAFlowingStreamDoNotNotifyAndNotifyAgainOnceItsLockIsReleased(t *testing.T) {
	t.Parallel()
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			pg := testenv.NewPGLayout(t, layout)
			s, err := store.New(pg.Pool, pg.Table)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			listen := testenv.Connect(t, pg.DSN)
			if _, err := listen.Exec(ctx, "LISTEN "+pg.Table.ListenChannel()); err != nil {
				t.Fatal(err)
			}
			insert := func(stream string) {
				t.Helper()
				if _, err := pg.Pool.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, payload) VALUES ($1, 't', 'x')`, stream); err != nil {
					t.Fatal(err)
				}
			}
			next := func() string {
				t.Helper()
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				n, err := listen.WaitForNotification(wctx)
				if err != nil {
					t.Fatalf("no notification: %v", err)
				}
				return n.Payload
			}

			lock, err := s.TryFlow(ctx, "orders")
			if err != nil || lock == nil {
				t.Fatalf("flow lock of a stream nobody flows: %v, %v", lock, err)
			}
			if other, err := s.TryFlow(ctx, "orders"); err != nil || other != nil {
				t.Fatalf("a second session took the flow lock of orders: %v, %v", other, err)
			}
			insert("orders")
			insert("payments")
			if got := next(); got != "payments" {
				t.Fatalf("first notification for %q: the flowing stream orders notified", got)
			}

			lock.Release(ctx)
			insert("orders")
			if got := next(); got != "orders" {
				t.Fatalf("after the flow lock was released, first notification for %q, want orders", got)
			}
			again, err := s.TryFlow(ctx, "orders")
			if err != nil || again == nil {
				t.Fatalf("flow lock after release: %v, %v", again, err)
			}
			again.Release(ctx)
		})
	}
}

// TestAFlowLockDiesWithItsConnection: a pipeline whose connection is gone stops nobody
// from notifying.
func TestAFlowLockDiesWithItsConnection(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lock, err := f.store.TryFlow(f.ctx, "orders")
	if err != nil || lock == nil {
		t.Fatalf("flow lock: %v, %v", lock, err)
	}
	// Terminate the holder's backend, as a database restart or a cut connection would.
	var killed bool
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = 1868724326 AND mode = 'ExclusiveLock' AND granted
		  AND objid = hashtext($1)::oid`, f.pg.Table.FlowLockKey("orders")).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the flow lock's session: %v, %v", killed, err)
	}
	for {
		other, err := f.store.TryFlow(f.ctx, "orders")
		if err == nil && other != nil {
			other.Release(f.ctx)
			break
		}
		if f.ctx.Err() != nil {
			t.Fatal("the flow lock outlived its session")
		}
		time.Sleep(10 * time.Millisecond) // the backend takes a moment to exit
	}
	lock.Release(f.ctx) // on a dead connection: closes it, does not hang or panic
}

// TestFlowLocksLeaveHalfThePoolToClaimWith takes the flow locks of three streams through
// a store whose pool has four connections and no sessions pool of its own: the third is
// refused, as if another session held it, so that flowing pipelines cannot take every
// connection their claims need; once one is released the third is taken.
func TestFlowLocksLeaveHalfThePoolToClaimWith(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := store.New(pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	var held []*store.Lock
	defer func() {
		for _, l := range held {
			l.Release(ctx)
		}
	}()
	for _, stream := range []string{"a", "b"} {
		l, err := s.TryFlow(ctx, stream)
		if err != nil || l == nil {
			t.Fatalf("flow lock of %s: %v, %v", stream, l, err)
		}
		held = append(held, l)
	}
	if l, err := s.TryFlow(ctx, "c"); err != nil || l != nil {
		l.Release(ctx)
		t.Fatalf("a third flow lock took a third of four connections: %v, %v", l, err)
	}
	held[0].Release(ctx)
	held = held[1:]
	l, err := s.TryFlow(ctx, "c")
	if err != nil || l == nil {
		t.Fatalf("flow lock of c once a was released: %v, %v", l, err)
	}
	held = append(held, l)
}
