package app

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/discard"
)

// startConfig is one stream to the discard driver on the table of pg, reached at dsn.
func startConfig(t *testing.T, pg *testenv.PG, dsn string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DatabaseURL = dsn
	cfg.Schema, cfg.TableName = pg.Table.Schema, pg.Table.Table
	cfg.Drivers = map[string]config.Driver{"d": {Type: discard.Type, Options: discard.DefaultOptions()}}
	s := config.DefaultStream()
	s.Driver = "d"
	cfg.Streams = map[string]config.Stream{"s": s}
	must(t, cfg.Validate())
	return &cfg
}

// holdAll acquires n connections of pool at once and returns them, for the caller to
// release: the idle ones first, then new ones.
func holdAll(t *testing.T, pool *pgxpool.Pool, n int) []*pgxpool.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	if t.Failed() {
		for _, c := range conns {
			if c != nil {
				c.Release()
			}
		}
		t.FailNow()
	}
	return conns
}

// TestTheStartsConnectionsJoinTheGeneralPoolWithADirectSessionsSettings: of the two
// connections run opens to probe for a pooler and check the schema, the one the
// listener does not take stays open in the general pool, so /readyz asks on it instead
// of waiting for a new one; and the pool's connections have the settings every other
// connection of the pool asks for at its start (JIT off, the server's keepalives),
// which the start's could not ask for before the probe answered.
func TestTheStartsConnectionsJoinTheGeneralPoolWithADirectSessionsSettings(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	cfg := startConfig(t, pg, pg.DSN)
	cfg.Database.KeepaliveIdle = 7 * time.Second
	d, err := NewDispatcher(t.Context(), cfg, slog.New(slog.DiscardHandler), Options{})
	must(t, err)
	defer func() { must(t, d.close()) }()

	if n := d.pool.Stat().NewConnsCount(); n != 2 {
		t.Errorf("the general pool opened %d connections by the end of the start; want the start's 2", n)
	}
	if err := d.store.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.store.SchemaVersion(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := d.pool.Stat().NewConnsCount(); n != 2 {
		t.Errorf("the readiness checks opened %d more connections; want none", n-2)
	}

	conns := holdAll(t, d.pool, 3) // the start's first and two new ones
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i, c := range conns {
		var jit, idle string
		err := c.QueryRow(t.Context(), "SELECT current_setting('jit'), current_setting('tcp_keepalives_idle')").Scan(&jit, &idle)
		must(t, err)
		if jit != "off" || idle != "7" {
			t.Errorf("connection %d of the general pool: jit %s, tcp_keepalives_idle %s; want off, 7", i, jit, idle)
		}
	}
}

// TestBehindPgBouncerTheGeneralPoolPreparesNoStatement: behind a transaction pooler the
// start's two connections, opened before the probe knew, are closed, and every
// connection of the general pool runs its statements in exec mode, which prepares none
// (a prepared statement lives on one server session, and the next transaction may get
// another).
func TestBehindPgBouncerTheGeneralPoolPreparesNoStatement(t *testing.T) {
	t.Parallel()
	w := newPooledWorld(t)
	cfg := startConfig(t, w.pg, w.pooled)
	cfg.Database.ListenURL = w.direct
	d, err := NewDispatcher(w.ctx, cfg, slog.New(slog.DiscardHandler), Options{})
	must(t, err)
	defer func() { must(t, d.close()) }()

	// A closed connection leaves the pool in the background once released. The pool
	// opened the start's two and then what the shared poll's first poll needed.
	kept := func() int32 { st := d.pool.Stat(); return st.TotalConns() - (int32(st.NewConnsCount()) - 2) }
	for deadline := time.Now().Add(5 * time.Second); kept() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the general pool kept %d of the start's connections behind PgBouncer; want none", kept())
		}
	}
	conns := holdAll(t, d.pool, 2)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i, c := range conns {
		if mode := c.Conn().Config().DefaultQueryExecMode; mode != pgx.QueryExecModeExec {
			t.Errorf("connection %d of the general pool runs statements in mode %s; want %s", i, mode, pgx.QueryExecModeExec)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var v string
		err := c.QueryRow(ctx, "SELECT $1::text", strconv.Itoa(i)).Scan(&v)
		cancel()
		must(t, err)
	}
}

// TestTheStartOpensTwoConnectionsAndTheListenerKeepsOne: on the way to ready the
// dispatcher opens two connections, not three, and not the pipelines' standing ones:
// the second start connection becomes the listener's, and the pipelines' pool opens its
// burst's connections once the start is over. Every connection is a server process
// forked for it, and on two cores the handshakes at once were most of exec → ready. A
// row committed before the start is claimed at once on the first poll's answer (asked
// on the listener's connection after its LISTEN), though that connection asks for no
// poll of its own, and a row committed between the start and Run on its notification.
func TestTheStartOpensTwoConnectionsAndTheListenerKeepsOne(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	app := "outboxd-start-" + pg.Table.Schema
	cfg := startConfig(t, pg, withAppName(t, pg.DSN, app))
	s := cfg.Streams["s"]
	s.PollInterval = time.Hour // a claim now can only come of the first poll or a notification
	cfg.Streams["s"] = s
	// A second stream for the row committed after the start: its notification wakes
	// its own pipeline only, so the row committed before is left to the first poll.
	cfg.Streams["u"] = s
	sessions := func() int {
		t.Helper()
		var n int
		must(t, pg.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
		return n
	}
	enqueue := func(stream string) int64 {
		t.Helper()
		var id int64
		must(t, pg.Pool.QueryRow(t.Context(), `INSERT INTO `+pg.Table.String()+
			` (stream, topic, key, payload) VALUES ($1, 'orders', 'k', '{}') RETURNING id`, stream).Scan(&id))
		return id
	}
	before := enqueue("s")
	began := time.Now()
	d, err := NewDispatcher(t.Context(), cfg, slog.New(slog.DiscardHandler), Options{})
	must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	running := false
	defer func() {
		cancel()
		if running {
			must(t, <-done)
		} else {
			d.close() // a check failed before Run: nothing else closes the pools
		}
	}()
	time.Sleep(100 * time.Millisecond) // for any connection opened in the background
	// The pipelines' pool opens its standing connections a second after it was built: on
	// a machine slow enough for that second to have passed, they are left out of the
	// count once all are open (a connection still opening is the pool's before the
	// server shows it).
	pipes := func() int { return int(d.pipePool.Stat().TotalConns()) }
	want := int(burstConns(cfg.Streams))
	// awaitBurst waits until count reaches the burst the pipelines' pool keeps open.
	awaitBurst := func(count func() int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); count() < int32(want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the pipelines' pool holds %d connections 5s after the start; want its burst's %d", pipes(), want)
			}
		}
	}
	opened := pipes()
	n := sessions()
	if opened != 0 && time.Since(began) < pipelineRefill*9/10 {
		t.Fatalf("the pipelines' pool opened %d connections during the start; want none before its refill", opened)
	}
	if opened != 0 || pipes() != 0 {
		awaitBurst(func() int32 { return d.pipePool.Stat().IdleConns() })
		n = sessions() - want
	}
	if n != 2 {
		t.Errorf("%d sessions after the start besides the pipelines' pool; want 2 (the general pool's and the listener's)", n)
	}
	during := enqueue("u")
	running = true
	go func() { done <- d.Run(ctx) }()
	for _, id := range []int64{before, during} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			var status string
			must(t, pg.Pool.QueryRow(t.Context(), `SELECT status FROM `+pg.Table.String()+` WHERE id = $1`, id).Scan(&status))
			if status == "delivered" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("row %d is %s 5s after the dispatcher began; want delivered (poll_interval is an hour)", id, status)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	awaitBurst(func() int32 { return d.pipePool.Stat().TotalConns() })
}

// A session's settings are given to the start's connections as SET statements, their
// values quoted so that each reads back as it was, whatever it holds and whatever the
// server's standard_conforming_strings.
func TestTheStartsSettingsReadBackAsGivenWhateverTheyHold(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	for _, conforming := range []string{"on", "off"} {
		for _, v := range []string{"plain", `it's`, `back\slash`, `both ' and \ and ''`, ""} {
			conn, err := pgx.Connect(t.Context(), pg.DSN)
			must(t, err)
			_, err = conn.Exec(t.Context(), "SET standard_conforming_strings TO "+conforming)
			must(t, err)
			s := &startConns{direct: map[string]string{"application_name": v}, unset: true}
			must(t, s.settleConn(t.Context(), conn))
			var got string
			must(t, conn.QueryRow(t.Context(), "SHOW application_name").Scan(&got))
			if got != v {
				t.Errorf("standard_conforming_strings %s: application_name %q reads back %q", conforming, v, got)
			}
			closeConn(conn)
		}
	}
}
