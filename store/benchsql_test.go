package store_test

import (
	"testing"

	"github.com/outboxd/outboxd/store"
)

// The bench asks every 10 ms whether a drain is over. Its mark moves to the first
// undelivered row, stream by stream, and the answer stays true until the last row of
// the last stream is delivered, whichever rows go first.
func TestBenchUndeliveredSeesEveryUndeliveredRowFromItsMark(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, s := range []string{"a", "b", "c"} {
		f.insert(t, s, 5)
	}
	q := f.pg.Table.Qualified()
	var mark store.BenchBacklogMark
	// Deliver the rows in an order that is not the mark's: c, then a but its last, b,
	// then the last of a.
	for _, step := range []string{
		`stream = 'c'`,
		`stream = 'a' AND id < (SELECT max(id) FROM ` + q + ` WHERE stream = 'a')`,
		`stream = 'b'`,
		`true`,
	} {
		undelivered, err := f.store.BenchUndelivered(f.ctx, &mark)
		if err != nil {
			t.Fatal(err)
		}
		if !undelivered {
			t.Fatalf("before delivering %s: no undelivered row seen", step)
		}
		if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+q+` SET status = 'delivered', published_at = now() WHERE `+step); err != nil {
			t.Fatal(err)
		}
	}
	undelivered, err := f.store.BenchUndelivered(f.ctx, &mark)
	if err != nil {
		t.Fatal(err)
	}
	if undelivered {
		t.Fatal("every row is delivered, yet one is seen undelivered")
	}
}
