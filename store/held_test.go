package store_test

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// A held claim's write-backs run in the transaction its claim opened, whose now() is the
// claim's time; they must be dated when they are written, as in lease mode: a retry's
// backoff counts from the refusal, published_at is the acknowledgement's time, and the
// owner who delivered the row is recorded.
func TestAHeldClaimsWriteBacksAreDatedWhenWrittenAndNameTheirOwner(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 2)
	c, err := f.store.ClaimHeld(f.ctx, "orders", 2, "replica-x", 30*time.Second, store.Position{})
	if err != nil || len(c.Messages) != 2 {
		t.Fatalf("claim: %d rows, %v", len(c.Messages), err)
	}
	var claimedAt time.Time
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT now()`).Scan(&claimedAt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the publish
	if _, err := f.store.Retry(f.ctx, c.Token, []store.Retry{{ID: c.Messages[1].ID, Delay: 100 * time.Millisecond, Err: "refused"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Commit(f.ctx, c.Token, []int64{c.Messages[0].ID}); err != nil {
		t.Fatal(err)
	}
	var publishedAfter, availableAfter time.Duration
	var owner string
	err = f.pg.Pool.QueryRow(f.ctx, `SELECT
		(SELECT published_at FROM `+f.pg.Table.Qualified()+` WHERE id = $1) - $3::timestamptz,
		(SELECT available_at FROM `+f.pg.Table.Qualified()+` WHERE id = $2) - $3::timestamptz,
		(SELECT owner FROM `+f.pg.Table.Qualified()+` WHERE id = $1)`,
		c.Messages[0].ID, c.Messages[1].ID, claimedAt).Scan(&publishedAfter, &availableAfter, &owner)
	if err != nil {
		t.Fatal(err)
	}
	if publishedAfter < 400*time.Millisecond {
		t.Errorf("published_at is %v after the claim; want the acknowledgement's time, 500ms later", publishedAfter)
	}
	if availableAfter < 500*time.Millisecond {
		t.Errorf("the retry is due %v after the claim; want its 100ms backoff counted from the refusal, 500ms later", availableAfter)
	}
	if owner != "replica-x" {
		t.Errorf("owner of the delivered row = %q, want replica-x", owner)
	}
}
