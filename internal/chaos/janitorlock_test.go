//go:build linux

package chaos_test

import (
	"context"
	"testing"
	"time"
)

// TestAReplicaFrozenHoldingTheJanitorLockDoesNotStopLeaseReclaiming holds the fix of
// finding F3 (docs/chaos.md): the janitor's lock is a session-level advisory lock, held
// for the length of a cycle, and a replica frozen in the middle of a cycle (SIGSTOP
// here; a frozen VM or a stalled host alike) keeps its connection and so the lock. No
// other replica's janitor used to reclaim an expired lease until it continued: the
// rows of a replica that died stayed leased meanwhile.
func TestAReplicaFrozenHoldingTheJanitorLockDoesNotStopLeaseReclaiming(t *testing.T) {
	t.Parallel()
	f := ciForm
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc := scenario{name: "janitor_lock"}
	w := newWorld(t, ctx, f, &sc)
	w.startReplicas()

	// Freeze r2 at a moment it holds the janitor's lock.
	r2 := w.replica("r2")
	deadline := time.Now().Add(2 * time.Minute)
	for frozen := false; !frozen; {
		if time.Now().After(deadline) {
			t.Fatal("never caught r2 holding the janitor's lock")
		}
		locked, err := w.holdsJanitorLock(r2.id)
		must(t, err)
		if !locked {
			continue // cycles are short and come every janitor interval: look again at once
		}
		must(t, r2.signal(stopSignal))
		if frozen, err = w.holdsJanitorLock(r2.id); err != nil {
			t.Fatal(err)
		}
		if !frozen {
			must(t, r2.signal(contSignal))
		}
	}
	defer func() { _ = r2.signal(contSignal) }()

	// An expired lease, as a replica that died mid-batch leaves one.
	var id int64
	must(t, w.pool.QueryRow(ctx, `INSERT INTO `+outboxName.Qualified()+` (stream, topic, payload, status, lease_token, lease_until, owner)
		VALUES ($1, $2, 'x', 'leased', gen_random_uuid(), now() - interval '1 minute', 'gone') RETURNING id`,
		streamOrders, kafkaTopic).Scan(&id))

	// r1 and r3 run their janitors every interval; ten intervals are plenty.
	wait := 10*w.set.janitorT + 5*time.Second
	err := w.await("the expired lease to be reclaimed and its row delivered", wait, func() (bool, error) {
		var status string
		err := w.pool.QueryRow(ctx, `SELECT status FROM `+outboxName.Qualified()+` WHERE id = $1`, id).Scan(&status)
		return status == "delivered", err
	})
	if err != nil {
		t.Errorf("with r2 frozen holding the janitor's lock, the other replicas did not reclaim an expired lease: %v", err)
	}
	must(t, r2.signal(contSignal))
	must(t, w.await("the lease to be reclaimed once r2 continues", wait, func() (bool, error) {
		var status string
		err := w.pool.QueryRow(ctx, `SELECT status FROM `+outboxName.Qualified()+` WHERE id = $1`, id).Scan(&status)
		return status == "delivered", err
	}))
}
