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

// TestTheStartsConnectionsJoinTheGeneralPoolWithADirectSessionsSettings: the two
// connections run opens to probe for a pooler and check the schema stay open in the
// general pool, so /readyz asks on them instead of waiting for a new one; and they have
// the settings every other connection of the pool asks for at its start (JIT off, the
// server's keepalives), which they could not ask for before the probe answered.
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

	conns := holdAll(t, d.pool, 3) // the start's two and a new one
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

	// A closed connection leaves the pool in the background once released.
	for deadline := time.Now().Add(5 * time.Second); d.pool.Stat().TotalConns() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the general pool kept %d of the start's connections behind PgBouncer; want none", d.pool.Stat().TotalConns())
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
