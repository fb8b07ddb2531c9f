package store_test

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// TestAnAcknowledgementSentAgainTellsItsOwnEarlierWriteFromATakeOver sends an
// acknowledgement again after its first try applied without an answer (finding F2,
// docs/chaos.md): the rows that try delivered count as already done, and only rows
// whose lease truly moved on are refused.
func TestAnAcknowledgementSentAgainTellsItsOwnEarlierWriteFromATakeOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 6)
	c := f.claim(t, "orders", 6) // owner replica-test
	ids := c.IDs()

	// The first try of the acknowledgement: applied, its answer lost.
	if res, err := f.store.Ack(f.ctx, c.Token, ids[:2]); err != nil || res.Changed != 2 {
		t.Fatalf("first try: %+v %v", res, err)
	}
	// Meanwhile rows 2-4 outlive their lease and are reclaimed; another replica claims
	// and delivers rows 2 and 3, row 4 waits pending. Row 5 is still ours.
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET lease_until = now() - interval '1 second'
		WHERE id = ANY($1)`, ids[2:5]); err != nil {
		t.Fatal(err)
	}
	if reclaimed, err := f.store.Reclaim(f.ctx, 100); err != nil || len(reclaimed) != 3 {
		t.Fatalf("reclaim: %d rows, %v; want 3", len(reclaimed), err)
	}
	other, err := f.store.Claim(f.ctx, "orders", 2, "replica-other", time.Minute, store.Position{})
	if err != nil || len(other.Messages) != 2 || other.IDs()[0] != ids[2] || other.IDs()[1] != ids[3] {
		t.Fatalf("the other replica claimed %v (%v); want rows %v", other.IDs(), err, ids[2:4])
	}
	if res, err := f.store.Ack(f.ctx, other.Token, other.IDs()); err != nil || res.Changed != 2 {
		t.Fatalf("the other replica's ack: %+v %v", res, err)
	}

	res, err := f.store.AckAgain(f.ctx, c.Token, "replica-test", c.LeaseUntil, ids)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 1 || res.Already != 2 || res.Refused != 3 || len(res.Lags) != 1 {
		t.Errorf("ack again: changed %d, already %d, refused %d, %d lags; want 1 acknowledged now (row 5), "+
			"2 delivered by the first try, 3 refused (two taken over, one reclaimed), 1 lag", res.Changed, res.Already, res.Refused, len(res.Lags))
	}
	if r := f.row(t, ids[5]); r.Status != "delivered" {
		t.Errorf("row still leased under the token: %+v, want delivered", r)
	}
	if r := f.row(t, ids[4]); r.Status != "pending" {
		t.Errorf("reclaimed row: %+v, want it left pending", r)
	}
}

// TestAnAcknowledgementSentAgainRefusesRowsItsOwnReplicaClaimedAgain: a replica whose
// lease ran out (its batch stalled past lease_until) and whose rows it then claimed
// again itself, and delivered, did not deliver them under this claim: sending this
// claim's acknowledgement again must count them as lease conflicts, not as its own
// earlier write, or the same delivery would be counted twice.
func TestAnAcknowledgementSentAgainRefusesRowsItsOwnReplicaClaimedAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 3)
	c := f.claim(t, "orders", 3) // owner replica-test
	ids := c.IDs()

	// The batch stalls past its lease; the rows are reclaimed and this same replica
	// claims them again and delivers them under the new claim.
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET lease_until = now() - interval '1 second'
		WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	var lapsed time.Time // the first claim's lease, as the database now holds it
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT max(lease_until) FROM `+f.pg.Table.Qualified()+` WHERE id = ANY($1)`, ids).Scan(&lapsed); err != nil {
		t.Fatal(err)
	}
	if reclaimed, err := f.store.Reclaim(f.ctx, 100); err != nil || len(reclaimed) != 3 {
		t.Fatalf("reclaim: %d rows, %v; want 3", len(reclaimed), err)
	}
	again := f.claim(t, "orders", 3)
	if res, err := f.store.Ack(f.ctx, again.Token, again.IDs()); err != nil || res.Changed != 3 {
		t.Fatalf("the second claim's ack: %+v %v", res, err)
	}

	// The stalled batch's acknowledgement, sent again after its first try timed out.
	res, err := f.store.AckAgain(f.ctx, c.Token, "replica-test", lapsed, ids)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 0 || res.Already != 0 || res.Refused != 3 {
		t.Errorf("ack again: changed %d, already %d, refused %d; want 3 refused: the rows were delivered "+
			"under the replica's second claim, not by this one", res.Changed, res.Already, res.Refused)
	}
}
