package producer_test

import (
	"testing"

	"github.com/outboxd/outboxd/producer"
)

// Two transactions writing the same key take turns: the second waits in LockKey until
// the first commits, so its message gets the later id and is never visible without the
// earlier one. A transaction on another key does not wait.
func TestLockKeyMakesProducersOfOneKeyTakeTurns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := ctx(t)
	first, err := e.pg.Pool.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(c)
	if err := e.w.LockKey(c, first, "orders", "order-1"); err != nil {
		t.Fatal(err)
	}
	firstID, err := e.w.Enqueue(c, first, producer.Message{Stream: "orders", Topic: "t", Key: "order-1", Payload: []byte("created")})
	if err != nil {
		t.Fatal(err)
	}

	// Another key goes through at once.
	other, err := e.pg.Pool.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.w.LockKey(c, other, "orders", "order-2"); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(c); err != nil {
		t.Fatal(err)
	}

	secondID := make(chan int64, 1)
	failed := make(chan error, 1)
	go func() {
		tx, err := e.pg.Pool.Begin(c)
		if err != nil {
			failed <- err
			return
		}
		defer tx.Rollback(c)
		if err := e.w.LockKey(c, tx, "orders", "order-1"); err != nil {
			failed <- err
			return
		}
		id, err := e.w.Enqueue(c, tx, producer.Message{Stream: "orders", Topic: "t", Key: "order-1", Payload: []byte("updated")})
		if err == nil {
			err = tx.Commit(c)
		}
		if err != nil {
			failed <- err
			return
		}
		secondID <- id
	}()
	// The second producer is seen waiting for the advisory lock (the event to await).
	for {
		var waiting int
		if err := e.pg.Pool.QueryRow(c, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		select {
		case id := <-secondID:
			t.Fatalf("the second producer of the key committed id %d while the first was open", id)
		case err := <-failed:
			t.Fatal(err)
		default:
		}
	}
	if err := first.Commit(c); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-secondID:
		if id <= firstID {
			t.Fatalf("second message id %d, want after the first's %d", id, firstID)
		}
	case err := <-failed:
		t.Fatal(err)
	}
}
