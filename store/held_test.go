package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// A held claim's transaction plans each of its statements once per connection and
// reuses that plan (heldSettingsSQL): left to choose, PostgreSQL planned the claim
// afresh for every execution. On a connection of its own, eight claims with their
// write-backs (retry, acknowledgement) must leave none of their statements on the table
// planned for its values.
func TestAHeldClaimPlansItsStatementsOnceForEveryExecution(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pool := f.poolWith(t, func(cfg *pgxpool.Config) { cfg.MaxConns, cfg.MinConns = 1, 0 })
	defer pool.Close()
	st, err := store.New(pool, f.pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	f.insert(t, "orders", 80)
	for i := range 8 {
		c, err := st.ClaimHeld(f.ctx, "orders", 10, "r", 30*time.Second, store.Position{})
		if err != nil || len(c.Messages) != 10 {
			t.Fatalf("claim %d: %d rows, %v", i, len(c.Messages), err)
		}
		ids := make([]int64, 0, 9)
		for _, m := range c.Messages[1:] {
			ids = append(ids, m.ID)
		}
		// The first row of each claim is retried far in the future, out of the next claims' way.
		if _, err := st.Retry(f.ctx, c.Token, []store.Retry{{ID: c.Messages[0].ID, Delay: time.Hour, Err: "refused"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Commit(f.ctx, c.Token, ids); err != nil {
			t.Fatal(err)
		}
	}
	var custom, generic int64
	// The statements that read or write the table (not the one setting the transaction
	// up, whose setting takes effect after it), asked in the simple protocol so that the
	// check itself is no prepared statement.
	if err := pool.QueryRow(f.ctx, `SELECT coalesce(sum(custom_plans), 0), coalesce(sum(generic_plans), 0)
		FROM pg_prepared_statements WHERE strpos(statement, $1) > 0`,
		pgx.QueryExecModeSimpleProtocol, f.pg.Table.Qualified()).Scan(&custom, &generic); err != nil {
		t.Fatal(err)
	}
	t.Logf("plans of the table's statements on the claims' connection: %d custom, %d generic", custom, generic)
	if custom != 0 || generic == 0 {
		t.Fatalf("eight held claims planned %d statements for their values (and %d generically); want none for their values", custom, generic)
	}
}
