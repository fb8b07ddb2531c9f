package store_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/chaos"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// TestAFlowLockWhoseHoldersPathStallsIsReleasedByTheServerWithinSeconds takes a flow lock
// through a proxy and then stalls the proxy: bytes stop both ways and no connection
// closes, as when a replica freezes or its network goes silent. Keepalive probes cannot
// tell this apart from a live peer here (the proxy's kernel answers them), so the lock's
// session must end on the server's own clock; until it does, producers of the stream
// send no notifications.
// stallableStore is a store whose sessions reach the test database through a proxy the
// test can stall, with holders counting the sessions that hold stream orders' flow lock
// (seen directly, not through the proxy).
func stallableStore(t *testing.T, ctx context.Context) (s *store.Store, proxy *chaos.Proxy, holders func() int) {
	t.Helper()
	pg := testenv.NewPG(t)
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.Host == "" || cfg.ConnConfig.Host[0] == '/' {
		t.Skip("the test database is reached over a Unix socket: no TCP path to stall")
	}
	proxy, err = chaos.Listen(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if s, err = store.New(pool, pg.Table); err != nil {
		t.Fatal(err)
	}
	holders = func() int {
		var n int
		if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1868724326
			AND objid = hashtext($1)::oid AND mode = 'ExclusiveLock' AND granted`, pg.Table.FlowLockKey("orders")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return s, proxy, holders
}

func TestAFlowLockWhoseHoldersPathStallsIsReleasedByTheServerWithinSeconds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, proxy, holders := stallableStore(t, ctx)

	lock, err := s.TryFlow(ctx, "orders")
	if err != nil || lock == nil {
		t.Fatalf("flow lock of a stream nobody flows: %v, %v", lock, err)
	}
	// Runs before the pool closes, which would wait for the lock's connection forever.
	t.Cleanup(func() { proxy.Restore(); lock.Release(ctx) })
	// A healthy holder keeps its lock past the server's idle limit.
	time.Sleep(2 * store.FlowLockIdle)
	if n := holders(); n != 1 {
		t.Fatalf("a healthy holder's flow lock: %d holders after %v; want 1", n, 2*store.FlowLockIdle)
	}
	proxy.Stall()
	awaitReleased(t, holders, "the flow lock of a holder whose path stalled")
}

// awaitReleased fails t unless holders reaches 0 within twice the flow lock's idle limit
// of now, the stall's start; what names the lock in the failure.
func awaitReleased(t *testing.T, holders func() int, what string) {
	t.Helper()
	start := time.Now()
	bound := 2 * store.FlowLockIdle
	for holders() != 0 {
		if time.Since(start) > bound {
			t.Fatalf("%s is still held after %v", what, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("released %v after the stall", time.Since(start).Round(10*time.Millisecond))
}

// TestAFlowLockWhosePathStallsAsItIsGrantedIsReleasedByTheServerWithinSeconds stalls the
// holder's path at the moment the server grants the lock, before the holder has heard
// so: the lock must already carry its idle limit. Every message of the proxy waits 200
// ms each way, so a limit sent after the lock's answer came back would be held by the
// stall, and the server would keep the lock for as long as the path stays silent (the
// chaos suite's flowing-replica-stalled caught that window).
func TestAFlowLockWhosePathStallsAsItIsGrantedIsReleasedByTheServerWithinSeconds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, proxy, holders := stallableStore(t, ctx)
	if err := s.Ping(ctx); err != nil { // the pool's connection, opened before the delay
		t.Fatal(err)
	}
	proxy.Delay(200 * time.Millisecond)
	type taken struct {
		lock *store.Lock
		err  error
	}
	tryCtx, tryCancel := context.WithTimeout(ctx, 20*time.Second)
	defer tryCancel()
	// The answer takes 200 ms to come back, so the lock is seen granted long before
	// TryFlow returns; a machine that stalls this goroutine longer than that lets TryFlow
	// return first, and the attempt is made again.
	var got chan taken
	for attempt := 1; ; attempt++ {
		got = make(chan taken, 1)
		go func() {
			l, err := s.TryFlow(tryCtx, "orders")
			got <- taken{l, err}
		}()
		var early *taken
		for early == nil && holders() == 0 {
			select {
			case r := <-got:
				early = &r
			default:
			}
		}
		if early == nil {
			break
		}
		if early.lock == nil || early.err != nil {
			t.Fatalf("flow lock of a stream nobody flows: %v, %v", early.lock, early.err)
		}
		early.lock.Release(ctx)
		if attempt == 3 {
			t.Fatal("TryFlow returned before the lock was seen granted, three times")
		}
	}
	proxy.Stall()
	t.Cleanup(func() {
		proxy.Restore()
		if r := <-got; r.lock != nil {
			r.lock.Release(ctx)
		}
	})
	awaitReleased(t, holders, "a flow lock whose holder's path stalled as it was granted")
}
