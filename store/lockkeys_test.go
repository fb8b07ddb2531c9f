package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// TestTwoTablesOfOneDatabaseNeverShareALock holds the janitor lock and a flow lock of
// one outbox table and takes those of another table in the same database: a replica
// serving both (config outboxes) runs both janitors and both flows. The same table's
// locks, asked for again from another pool (another replica), stay excluded.
func TestTwoTablesOfOneDatabaseNeverShareALock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := testenv.NewPG(t), testenv.NewPG(t)
	if a.DSN != b.DSN || a.Table.Table != b.Table.Table {
		t.Fatalf("want two tables of one name in one database, got %s and %s", a.Table, b.Table)
	}
	open := func(pg *testenv.PG) *store.Store {
		t.Helper()
		s, err := store.New(pg.Pool, pg.Table)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sa, sb, sa2 := open(a), open(b), open(a)

	type take struct {
		what string
		try  func(*store.Store) (*store.Lock, error)
	}
	for _, k := range []take{
		{"janitor lock", func(s *store.Store) (*store.Lock, error) { return s.TryLock(ctx) }},
		{"flow lock of stream orders", func(s *store.Store) (*store.Lock, error) { return s.TryFlow(ctx, "orders") }},
	} {
		held, err := k.try(sa)
		if err != nil || held == nil {
			t.Fatalf("%s of %s: got %v, %v; want it taken", k.what, a.Table, held, err)
		}
		other, err := k.try(sb)
		if err != nil || other == nil {
			t.Errorf("%s of %s while %s holds its own: got %v, %v; want it taken (one table's lock must not exclude another's)",
				k.what, b.Table, a.Table, other, err)
		}
		again, err := k.try(sa2)
		if err != nil || again != nil {
			t.Errorf("%s of %s taken twice: got %v, %v; want it refused while held", k.what, a.Table, again, err)
		}
		for _, l := range []*store.Lock{held, other, again} {
			if l != nil {
				l.Release(ctx)
			}
		}
	}
}
