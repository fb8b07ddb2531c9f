package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

// dedupIDs reads each row's dedup_id; a NULL reads as "".
func (f *fixture) dedupIDs(t testing.TB) map[int64]string {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT id, coalesce(dedup_id::text, '') FROM `+f.pg.Table.Qualified())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var d string
		if err := rows.Scan(&id, &d); err != nil {
			t.Fatal(err)
		}
		out[id] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// beforeDedupID takes the fixture's table back to the version before dedup_id, runs
// insert there, and migrates it forward again.
func (f *fixture) beforeDedupID(t *testing.T, layout migrations.Layout, insert func()) {
	t.Helper()
	mg, err := layout.Open(f.ctx, f.pg.DSN, f.pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	// Step down until version 3, the one before dedup_id, however many came after 0004.
	for {
		v, _, err := mg.Version()
		if err != nil {
			t.Fatal(err)
		}
		if v <= 3 {
			if v != 3 {
				t.Fatalf("stepped down to version %d; want 3 (the version before dedup_id)", v)
			}
			break
		}
		if err := mg.Down(1); err != nil {
			t.Fatal(err)
		}
	}
	insert()
	if err := mg.Up(); err != nil {
		t.Fatal(err)
	}
}

func TestARowOlderThanItsDedupIDGetsOneAtItsFirstClaimAndKeepsIt(t *testing.T) {
	t.Parallel()
	claims := []struct {
		name  string
		claim func(f *fixture, t *testing.T) store.Claim
	}{
		{"a plain stream's claim", func(f *fixture, t *testing.T) store.Claim { return f.claim(t, "s", 100) }},
		{"an ordered stream's claim", func(f *fixture, t *testing.T) store.Claim {
			var cur store.KeyCursor
			return f.claimOrdered(t, &cur, 100)
		}},
	}
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		for _, c := range claims {
			t.Run(c.name+" on the "+layout.String()+" layout", func(t *testing.T) {
				t.Parallel()
				pg := testenv.NewPGLayout(t, layout)
				st, err := store.New(pg.Pool, pg.Table)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				t.Cleanup(cancel)
				f := &fixture{pg: pg, store: st, ctx: ctx}
				f.claimKeepsDedupIDs(t, layout, func() store.Claim { return c.claim(f, t) })
			})
		}
	}
}

// claimKeepsDedupIDs inserts rows before and after migration 0004 and checks that claim
// gives each one dedup id, persisted and kept by the next claim.
func (f *fixture) claimKeepsDedupIDs(t *testing.T, layout migrations.Layout, claim func() store.Claim) {
	t.Helper()
	f.beforeDedupID(t, layout, func() { f.insert(t, "s", 5) })
	for id, d := range f.dedupIDs(t) {
		if d != "" {
			t.Fatalf("the migration gave pre-existing row %d the dedup_id %s: it must not rewrite the table", id, d)
		}
	}
	f.insert(t, "s", 3) // rows inserted after the migration draw theirs at INSERT
	inserted := f.dedupIDs(t)
	drawn := 0
	for _, d := range inserted {
		if d != "" {
			drawn++
		}
	}
	if drawn != 3 {
		t.Fatalf("%d rows have a dedup_id before any claim, want the 3 inserted after the migration", drawn)
	}

	first := claim()
	if len(first.Messages) != 8 {
		t.Fatalf("claimed %d rows, want 8", len(first.Messages))
	}
	stored := f.dedupIDs(t)
	seen := map[string]bool{}
	for _, m := range first.Messages {
		if m.DedupID == "" || m.DedupID != stored[m.ID] {
			t.Fatalf("row %d was claimed with dedup id %q but holds %q", m.ID, m.DedupID, stored[m.ID])
		}
		if inserted[m.ID] != "" && inserted[m.ID] != m.DedupID {
			t.Fatalf("the claim replaced row %d's dedup id %s with %s", m.ID, inserted[m.ID], m.DedupID)
		}
		if seen[m.DedupID] {
			t.Fatalf("dedup id %s given twice", m.DedupID)
		}
		seen[m.DedupID] = true
	}

	// The broker's answer was lost: the rows come back and are published again.
	if _, err := f.store.Release(f.ctx, first.Token, first.IDs()); err != nil {
		t.Fatal(err)
	}
	again := claim()
	if len(again.Messages) != 8 {
		t.Fatalf("claimed %d rows again, want 8", len(again.Messages))
	}
	for _, m := range again.Messages {
		if m.DedupID != stored[m.ID] {
			t.Fatalf("row %d was re-published with dedup id %s after %s: the broker could not tell the repeat",
				m.ID, m.DedupID, stored[m.ID])
		}
	}
}
