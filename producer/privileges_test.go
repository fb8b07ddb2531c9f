package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxd/outboxd/table"
)

// An application role needs no more than this on the outbox table: INSERT, and SELECT on
// id for the single writes, whose RETURNING id reads it. No sequence privilege: the id is
// an identity column. No grant for the key lock either: its function is PUBLIC.
func TestARoleAllowedOnlyToInsertAndReadIDsCanUseEveryEntryPoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	role := "producer_" + e.pg.Table.Schema // schemas are unique per test, roles per cluster
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + table.Quote(e.pg.Table.Schema) + " TO " + role,
		"GRANT INSERT, SELECT (id) ON " + e.pg.Table.Qualified() + " TO " + role,
	} {
		if _, err := e.pg.Pool.Exec(ctx(t), stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := e.pg.Pool.Exec(c, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})

	cfg, err := pgxpool.ParseConfig(e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := stdlib.OpenDB(*cfg.ConnConfig)
	t.Cleanup(func() { _ = db.Close() })
	pg := *e.pg
	pg.Pool = pool
	app := &env{pg: &pg, db: db, w: e.w}

	for _, ep := range allEntryPoints {
		x := ep.begin(app, t)
		if _, err := ep.write(ctx(t), app.w, x, immediate()); err != nil {
			t.Errorf("%s as %s: %v", ep.name, role, err)
		}
		x.rollback(t)
	}
	// The key lock of ordered streams needs nothing more either.
	for _, g := range goHolders {
		s := g.open(t, app, "orders", "order-1")
		if err := s.lock(ctx(t)); err != nil {
			t.Errorf("%s as %s: %v", g.name, role, err)
		}
		s.tx.rollback(t) // the next entry point takes the same key
	}
}
