package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

func TestOnlyOneJanitorPerTableWorksInACycleWhileAnotherTablesJanitorIsUnaffected(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := testenv.NewPG(t) // a second outbox table, as a second deployment would have
	otherStore, err := store.New(other.Pool, other.Table)
	must(t, err)

	// Replica A is in the middle of its cycle: it holds the table's lock.
	held, err := f.store.TryLock(f.ctx)
	must(t, err)
	if held == nil {
		t.Fatal("the first lock attempt on a fresh table failed")
	}
	rec := newRecorder()
	b := dispatch.NewJanitor(dispatch.JanitorConfig{}, f.store, rec, nil)
	if ran, err := b.Cycle(f.ctx); err != nil || ran {
		t.Fatalf("replica B's cycle while A holds the lock: ran=%v err=%v", ran, err)
	}
	if e := rec.await(t, time.Second, "the skipped cycle", func(e events.Event) bool { _, ok := e.(events.JanitorCycle); return ok }); !e.(events.JanitorCycle).Skipped {
		t.Fatalf("cycle event: %+v", e)
	}
	if ran, err := dispatch.NewJanitor(dispatch.JanitorConfig{}, otherStore, nil, nil).Cycle(f.ctx); err != nil || !ran {
		t.Fatalf("the other table's janitor was blocked: ran=%v err=%v", ran, err)
	}
	held.Release(f.ctx)
	if ran, err := b.Cycle(f.ctx); err != nil || !ran {
		t.Fatalf("replica B's cycle after A released: ran=%v err=%v", ran, err)
	}
}

func TestLeasesOfADeadReplicaAreReclaimedWithoutSpendingAttemptsAndDeliveredByAnother(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 250)
	// A replica claims and dies before writing anything back; its leases expire.
	dead, err := f.store.Claim(f.ctx, "orders", 250, "dead-replica", time.Millisecond, store.Position{})
	must(t, err)
	if len(dead.Messages) != 250 {
		t.Fatalf("dead replica claimed %d", len(dead.Messages))
	}
	waitFor(t, 10*time.Second, "the leases to expire", func() bool {
		var expired int
		must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE lease_until < now()`).Scan(&expired))
		return expired == 250
	})

	rec := newRecorder()
	j := dispatch.NewJanitor(dispatch.JanitorConfig{ReclaimBatch: 100, ReclaimRounds: 2}, f.store, rec, nil)
	ran, err := j.Cycle(f.ctx)
	if err != nil || !ran {
		t.Fatalf("cycle: ran=%v err=%v", ran, err)
	}
	// Bounded: two rounds of 100 this cycle, the rest in the next.
	e := rec.await(t, time.Second, "leases reclaimed", func(e events.Event) bool { _, ok := e.(events.LeasesReclaimed); return ok }).(events.LeasesReclaimed)
	if e.Count != 200 || len(e.Overdue) != 200 || e.Overdue[0] <= 0 {
		t.Fatalf("first cycle reclaimed %+v", e.Count)
	}
	if _, err := j.Cycle(f.ctx); err != nil {
		t.Fatal(err)
	}
	if c := f.counts(t); c["pending"] != 250 || c["leased"] != 0 {
		t.Fatalf("after reclaiming: %v", c)
	}
	var attempts int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+f.pg.Table.Qualified()).Scan(&attempts))
	if attempts != 0 {
		t.Fatalf("reclaiming spent %d attempts", attempts)
	}
	// The dead replica's late write-back is refused; another replica delivers.
	if res, err := f.store.Ack(f.ctx, dead.Token, dead.IDs()); err != nil || res.Changed != 0 || res.Refused != 250 {
		t.Fatalf("late ack of the dead replica: %+v %v", res, err)
	}
	run(t, pipeline(t, f, dispatch.PipelineConfig{Owner: "survivor"}, newFakePublisher(nil), nil))
	waitFor(t, 30*time.Second, "the survivor delivering", func() bool { return f.counts(t)["delivered"] == 250 })
}

func TestRetentionPurgesOnlyOldDeliveredRowsInBoundedChunks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload, status, published_at, last_error, created_at)
		SELECT 'orders', 't', 'x'::bytea, 'delivered', now() - interval '2 days', NULL, now() - interval '3 days' FROM generate_series(1, 100000)
		UNION ALL SELECT 'orders', 't', 'x', 'delivered', now() - interval '1 hour', NULL, now() - interval '3 days' FROM generate_series(1, 10)
		UNION ALL SELECT 'orders', 't', 'x', 'pending', NULL, NULL, now() - interval '3 days' FROM generate_series(1, 10)
		UNION ALL SELECT 'orders', 't', 'x', 'failed', NULL, 'refused', now() - interval '3 days' FROM generate_series(1, 10)`)
	must(t, err)
	rec := newRecorder()
	j := dispatch.NewJanitor(dispatch.JanitorConfig{Retention: 24 * time.Hour, PurgeBatch: 5000, PurgeChunks: 8}, f.store, rec, nil)

	sweeps := 0
	var deleted int64
	for f.counts(t)["delivered"] > 10 {
		if sweeps++; sweeps > 10 {
			t.Fatal("retention did not finish in 10 cycles")
		}
		_, err := j.Cycle(f.ctx)
		must(t, err)
		e := rec.await(t, time.Second, "a sweep", func(e events.Event) bool { _, ok := e.(events.RetentionSwept); return ok }).(events.RetentionSwept)
		if e.Chunks > 8 || e.Deleted > 8*5000 {
			t.Fatalf("one cycle ran %d chunks deleting %d rows; the bound is 8 chunks of 5000", e.Chunks, e.Deleted)
		}
		deleted += e.Deleted
	}
	if deleted != 100000 || sweeps != 3 {
		t.Fatalf("deleted %d rows in %d cycles; want 100000 in 3 (8 + 8 + 4 chunks)", deleted, sweeps)
	}
	if c := f.counts(t); c["delivered"] != 10 || c["pending"] != 10 || c["failed"] != 10 {
		t.Fatalf("after retention: %v; want the recent delivered, pending and failed rows kept", c)
	}
}

func TestTheSamplerReportsEveryStreamsBacklog(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload, status, last_error, deferred_since, created_at, available_at, lease_token, lease_until, owner)
		VALUES ('a', 't', 'x', 'pending', NULL, NULL, now() - interval '90 seconds', now() - interval '90 seconds', NULL, NULL, NULL),
		       ('a', 't', 'x', 'pending', 'down', now(), now(), now() + interval '1 minute', NULL, NULL, NULL),
		       ('a', 't', 'x', 'leased', NULL, NULL, now() - interval '1 hour', now() - interval '1 hour', gen_random_uuid(), now() + interval '1 minute', 'r'),
		       ('a', 't', 'x', 'failed', 'no', NULL, now() - interval '1 day', now() - interval '1 day', NULL, NULL, NULL),
		       ('b', 't', 'x', 'failed', 'no', NULL, now(), now(), NULL, NULL, NULL),
		       ('c', 't', 'x', 'pending', NULL, NULL, now() - interval '1 hour', now() + interval '1 day', NULL, NULL, NULL)`)
	must(t, err)
	rec := newRecorder()
	s := dispatch.NewSampler(dispatch.SamplerConfig{Interval: time.Second,
		Probes: []dispatch.Probe{dispatch.BacklogProbe([]string{"a", "b", "c", "idle"}, f.store)}}, rec, nil)
	must(t, s.Sample(f.ctx))
	got := map[string]events.Backlog{}
	for len(got) < 4 {
		e := rec.await(t, time.Second, "backlog events", func(e events.Event) bool { _, ok := e.(events.Backlog); return ok }).(events.Backlog)
		got[e.Stream] = e
	}
	a, b, idle := got["a"], got["b"], got["idle"]
	if a.Pending != 2 || a.Deferred != 1 || a.Leased != 1 || a.Failed != 1 || a.OldestPendingAge < 89*time.Second || a.OldestPendingAge > 2*time.Minute {
		t.Fatalf("stream a: %+v", a)
	}
	if b.Failed != 1 || b.Pending != 0 || b.OldestPendingAge != 0 {
		t.Fatalf("stream b: %+v", b)
	}
	if c := got["c"]; c.Pending != 1 || c.OldestPendingAge != 0 {
		t.Fatalf("a message delayed on purpose counts as late: %+v", c)
	}
	if idle != (events.Backlog{Stream: "idle"}) {
		t.Fatalf("a stream without rows must report zeros, not be absent: %+v", idle)
	}
}

func TestOnAPartitionedTableTheJanitorKeepsPartitionsAndReportsDefaultRowsInsteadOfDeleting(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPGLayout(t, migrations.Partitioned)
	st, err := store.New(pg.Pool, pg.Table)
	must(t, err)
	ctx := context.Background()
	rec := newRecorder()
	j := dispatch.NewJanitor(dispatch.JanitorConfig{
		Retention:  time.Hour,
		Partitions: dispatch.NewPartitions(dispatch.PartitionsConfig{Interval: 24 * time.Hour, Ahead: 3, Retention: time.Hour}, st, nil),
	}, st, rec, nil)
	ran, err := j.Cycle(ctx)
	if err != nil || !ran {
		t.Fatalf("cycle: ran=%v err=%v", ran, err)
	}
	created := 0
	rec.mu.Lock()
	seen := append([]events.Event(nil), rec.events...)
	rec.mu.Unlock()
	for _, e := range seen {
		if p, ok := e.(events.PartitionChanged); ok && p.Created {
			created++
		}
	}
	if created < 3 {
		t.Fatalf("%d partitions created ahead, want at least 3", created)
	}
	// A row dated outside every partition lands in the default one and is reported;
	// an old delivered row inside a live partition is not deleted row by row.
	_, err = pg.Pool.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, payload, created_at) VALUES ('s', 't', 'x', now() + interval '400 days')`)
	must(t, err)
	_, err = pg.Pool.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, payload, status, published_at) VALUES ('s', 't', 'x', 'delivered', now() - interval '2 hours')`)
	must(t, err)
	if _, err := j.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	rec.await(t, time.Second, "default partition rows", func(e events.Event) bool {
		d, ok := e.(events.DefaultPartitionRows)
		return ok && d.Rows == 1
	})
	var delivered int
	must(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pg.Table.Qualified()+` WHERE status = 'delivered'`).Scan(&delivered))
	if delivered != 1 {
		t.Fatalf("the janitor deleted delivered rows of a partitioned table (%d left); retention there is a DROP", delivered)
	}
}

// A replica frozen in the middle of its janitor cycle (SIGSTOP, a stalled VM) keeps the
// table's lock; the other replicas must still reclaim a dead replica's expired leases,
// or its rows would wait for the frozen one (finding F3 in docs/chaos.md). Only the
// purge waits for the lock.
func TestExpiredLeasesAreReclaimedWhileAnotherReplicaHoldsTheJanitorLock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 30)
	frozen, err := f.store.TryLock(f.ctx)
	must(t, err)
	if frozen == nil {
		t.Fatal("the first lock attempt on a fresh table failed")
	}
	defer frozen.Release(f.ctx)
	dead, err := f.store.Claim(f.ctx, "orders", 30, "dead-replica", time.Millisecond, store.Position{})
	must(t, err)
	waitFor(t, 10*time.Second, "the leases to expire", func() bool {
		var expired int
		must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE lease_until < now()`).Scan(&expired))
		return expired == len(dead.Messages)
	})
	ran, err := dispatch.NewJanitor(dispatch.JanitorConfig{}, f.store, nil, nil).Cycle(f.ctx)
	if err != nil || ran {
		t.Fatalf("cycle while another replica holds the lock: ran=%v err=%v; want the locked work skipped", ran, err)
	}
	if c := f.counts(t); c["pending"] != 30 || c["leased"] != 0 {
		t.Fatalf("after the cycle: %v; want every expired lease reclaimed", c)
	}
}
