package store_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/store"
)

// execT is exec for benchmarks too: SQL with the table in place of {{table}}.
func (f *fixture) execT(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := f.pg.Pool.Exec(f.ctx, strings.ReplaceAll(sql, "{{table}}", f.pg.Table.Qualified()), args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestUnservedStreamsListsOnlyPendingRowsOfStreamsNobodyServes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 5)   // served
	f.insert(t, "ordres", 3)   // a producer's typo: nobody serves it
	f.insert(t, "refunds", 2)  // not configured yet
	f.insert(t, "payments", 4) // served
	// Of refunds: one row waiting for an hour, one delayed into the future.
	f.execT(t, `UPDATE {{table}} SET available_at = now() - interval '1 hour'
		WHERE id = (SELECT min(id) FROM {{table}} WHERE stream = 'refunds')`)
	f.execT(t, `INSERT INTO {{table}} (stream, topic, payload, available_at) VALUES ('refunds', 'later', 'x', now() + interval '1 day')`)
	// Rows that are not pending do not count, whatever their stream.
	f.execT(t, `INSERT INTO {{table}} (stream, topic, payload, status, published_at) VALUES ('audit', 't', 'x', 'delivered', now())`)
	f.execT(t, `INSERT INTO {{table}} (stream, topic, payload, status, last_error) VALUES ('audit', 't', 'x', 'failed', 'gone'), ('ordres', 't', 'x', 'failed', 'gone')`)

	got, err := f.store.UnservedStreams(f.ctx, []string{"orders", "payments", "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Stream != "ordres" || got[1].Stream != "refunds" {
		t.Fatalf("unserved streams = %+v, want ordres and refunds in name order", got)
	}
	if got[0].Pending != 3 || got[1].Pending != 3 {
		t.Fatalf("pending counts = %d and %d, want 3 (failed rows excluded) and 3 (the delayed row included)", got[0].Pending, got[1].Pending)
	}
	if o := got[1].Oldest; o < 59*time.Minute || o > 61*time.Minute {
		t.Fatalf("refunds' oldest due row waited %s, want about 1h", o)
	}
	if o := got[0].Oldest; o < 0 || o > time.Minute {
		t.Fatalf("ordres' oldest due row waited %s, want the few seconds since the insert", o)
	}
}

func TestUnservedStreamsWithNothingServedListsEveryPendingStream(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "b", 1)
	f.insert(t, "a", 2)
	for _, served := range [][]string{nil, {}} {
		got, err := f.store.UnservedStreams(f.ctx, served)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Stream != "a" || got[0].Pending != 2 || got[1].Stream != "b" {
			t.Fatalf("served %#v: %+v", served, got)
		}
	}
	got, err := f.store.UnservedStreams(f.ctx, []string{"a", "b"})
	if err != nil || len(got) != 0 {
		t.Fatalf("everything served: %+v, %v", got, err)
	}
}

func TestUnservedStreamsOnlyDelayedRowsHaveNoAge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.execT(t, `INSERT INTO {{table}} (stream, topic, payload, available_at) VALUES ('later', 't', 'x', now() + interval '1 hour'),
		('forever', 't', 'x', 'infinity'), ('always', 't', 'x', '-infinity')`)
	got, err := f.store.UnservedStreams(f.ctx, nil)
	if err != nil {
		t.Fatalf("rows dated ±infinity by a producer broke the sample: %v", err)
	}
	want := []store.UnservedStream{{Stream: "always", Pending: 1}, {Stream: "forever", Pending: 1}, {Stream: "later", Pending: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestUnservedStreamsListsAtMostTheBoundOfStreams(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.execT(t, `INSERT INTO {{table}} (stream, topic, payload)
		SELECT 's' || lpad(g::text, 5, '0'), 't', 'x' FROM generate_series(1, $1) g`, store.MaxUnservedStreams+50)
	got, err := f.store.UnservedStreams(f.ctx, []string{"s00001"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != store.MaxUnservedStreams || got[0].Stream != "s00002" {
		t.Fatalf("listed %d streams starting at %q, want %d starting at s00002", len(got), got[0].Stream, store.MaxUnservedStreams)
	}
}

func TestUnservedStreamsWorksOnAPartitionedTable(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	f.insert(t, "orders", 3)
	f.insert(t, "stray", 2)
	got, err := f.store.UnservedStreams(f.ctx, []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Stream != "stray" || got[0].Pending != 2 {
		t.Fatalf("got %+v", got)
	}
}

// BenchmarkUnservedStreams samples a table holding 1M delivered rows, 100,000 pending
// rows of 10 served streams and 1,000 pending rows of 5 unserved ones, on a pool with jit
// on (PostgreSQL's default) and off (the dispatcher's pool).
func BenchmarkUnservedStreams(b *testing.B) {
	f := setupB(b)
	f.execT(b, `INSERT INTO {{table}} (stream, topic, payload, status, published_at)
		SELECT 'served-' || (g % 10), 't', 'x', 'delivered', now() FROM generate_series(1, 1000000) g`)
	f.execT(b, `INSERT INTO {{table}} (stream, topic, payload)
		SELECT 'served-' || (g % 10), 't', 'x' FROM generate_series(1, 100000) g`)
	f.execT(b, `INSERT INTO {{table}} (stream, topic, payload)
		SELECT 'stray-' || (g % 5), 't', 'x' FROM generate_series(1, 1000) g`)
	f.execT(b, `ANALYZE {{table}}`)
	served := make([]string, 10)
	for i := range served {
		served[i] = fmt.Sprintf("served-%d", i)
	}
	for _, jit := range []string{"on", "off"} {
		b.Run("jit="+jit, func(b *testing.B) {
			pool := f.poolWith(b, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["jit"] = jit })
			defer pool.Close()
			st, err := store.New(pool, f.pg.Table)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				got, err := st.UnservedStreams(f.ctx, served)
				if err != nil || len(got) != 5 {
					b.Fatalf("%+v, %v", got, err)
				}
			}
		})
	}
}
