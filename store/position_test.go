package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// A claim from a position takes the rows after it in claim order, (available_at, id),
// and reports its last row's position, whatever order the database returned its rows
// in; a claim from the zero position takes every row, rows available since -infinity
// first. Both claim modes read the same way.
func TestAClaimFromAPositionTakesOnlyTheRowsAfterItInClaimOrder(t *testing.T) {
	t.Parallel()
	type claimFunc func(f *fixture, limit int, from store.Position) store.Claim
	modes := map[string]claimFunc{
		"by lease": func(f *fixture, limit int, from store.Position) store.Claim {
			return f.claimHandedBack(t, limit, from)
		},
		"held in a transaction": func(f *fixture, limit int, from store.Position) store.Claim {
			c, err := f.store.ClaimHeld(f.ctx, "orders", limit, "r", time.Minute, from)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Messages) > 0 {
				if _, err := f.store.Commit(f.ctx, c.Token, nil); err != nil { // hand the rows back
					t.Fatal(err)
				}
			}
			return c
		},
	}
	for name, claim := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			// Ids 1..6 in insertion order; their availability puts them in claim order
			// 3, 6, 1, 4, 2, 5 (-infinity first, ties by id).
			var ids []int64
			for _, at := range []string{"'2020-01-02'", "'2020-01-03'", "'-infinity'", "'2020-01-02'", "'2020-01-03'", "'-infinity'"} {
				var id int64
				if err := f.pg.Pool.QueryRow(context.Background(), `INSERT INTO `+f.pg.Table.Qualified()+
					` (stream, topic, payload, available_at) VALUES ('orders', 't', '\x00', `+at+`) RETURNING id`).Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			order := []int64{ids[2], ids[5], ids[0], ids[3], ids[1], ids[4]}
			sorted := func(c store.Claim) []int64 { s := c.IDs(); slices.Sort(s); return s }

			// Claims of 3: the first's last row (id 1) is not its highest id (6).
			var got [][]int64
			var from store.Position
			for range 2 {
				c := claim(f, 3, from)
				if len(c.Messages) != 3 || c.Last.IsZero() {
					t.Fatalf("claim from %v: %d rows, last %v; want 3 and a position", from, len(c.Messages), c.Last)
				}
				got = append(got, sorted(c))
				from = c.Last
			}
			want := [][]int64{sorted3(order[:3]), sorted3(order[3:])}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("claims from each previous claim's position took %v; want %v", got, want)
			}
			if c := claim(f, 10, from); len(c.Messages) != 0 || !c.Last.IsZero() {
				t.Fatalf("a claim after the last row took %v, last %v", c.IDs(), c.Last)
			}
			if c := claim(f, 10, store.Position{}); len(c.Messages) != 6 {
				t.Fatalf("a claim from the zero position took %d rows; want all 6", len(c.Messages))
			}
		})
	}
}

func sorted3(ids []int64) []int64 { s := slices.Clone(ids); slices.Sort(s); return s }

// The claimers of one stream share a Resume: each next claim starts after the furthest
// row any of them claimed, however the claims' records interleave (a slot that claimed
// earlier may finish later). Resuming after a claimer's own last row would take the rows
// a neighbour claimed meanwhile, here handed back so that taking them shows. A short
// claim sends the next to the start, and RescanEvery after the last claim from the
// start one goes there again, for that claim only.
func TestClaimersSharingAResumeStartAfterTheFurthestRowAnyOfThemClaimed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 10)
	claim := func(limit int, from store.Position) store.Claim { return f.claimHandedBack(t, limit, from) }
	now := time.Now()
	var r store.Resume
	if from := r.From(now); !from.IsZero() {
		t.Fatalf("a new Resume starts at %v; want the zero position", from)
	}
	first := claim(3, store.Position{}) // rows 1-3
	second := claim(3, first.Last)      // rows 4-6, by the other slot
	r.Claimed(second, 3)                // recorded first
	r.Claimed(first, 3)                 // recorded later: must not move the position back
	next := claim(3, r.From(now.Add(time.Millisecond)))
	if got, want := sorted3(next.IDs()), sorted3(claim(3, second.Last).IDs()); !slices.Equal(got, want) {
		t.Fatalf("the next claim took %v; want the rows after the furthest claim, %v", got, want)
	}
	if from := r.From(now.Add(store.RescanEvery)); !from.IsZero() {
		t.Fatalf("RescanEvery after the last claim from the start, a claim starts at %v; want the zero position", from)
	}
	if from := r.From(now.Add(store.RescanEvery + time.Millisecond)); from != second.Last {
		t.Fatalf("the claim after a rescan starts at %v; want after the furthest row, %v", from, second.Last)
	}
	r.Claimed(claim(5, second.Last), 5) // 4 rows left after it: short
	if from := r.From(now.Add(store.RescanEvery + 2*time.Millisecond)); !from.IsZero() {
		t.Fatalf("after a short claim the next starts at %v; want the zero position", from)
	}
	r.Claimed(first, 3)
	r.Restart(now.Add(store.RescanEvery + 3*time.Millisecond))
	if from := r.From(now.Add(store.RescanEvery + 4*time.Millisecond)); !from.IsZero() {
		t.Fatalf("after a restart the next claim starts at %v; want the zero position", from)
	}
}

// claimHandedBack leases up to limit rows of stream orders from a position and hands them
// straight back, so that a later claim can take them again: which rows a claim took
// shows, not whether they were still free.
func (f *fixture) claimHandedBack(t *testing.T, limit int, from store.Position) store.Claim {
	t.Helper()
	c, err := f.store.Claim(f.ctx, "orders", limit, "r", time.Minute, from)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, c.Token, c.IDs()); err != nil {
		t.Fatal(err)
	}
	return c
}
