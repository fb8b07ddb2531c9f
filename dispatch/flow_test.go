package dispatch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

// flowHolders counts the sessions holding a flow lock of the fixture's table.
func (f *fixture) flowHolders(t *testing.T, stream string) int {
	t.Helper()
	var n int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1868724326
		AND objid = hashtext($1)::oid AND mode = 'ExclusiveLock' AND granted`, f.pg.Table.FlowLockKey(stream)).Scan(&n))
	return n
}

// TestFlowingPipelinesLoseNothingWhileProducersStartAndStop runs three replicas' pipelines
// of one stream against producers that come in bursts fast enough to start a flow, with
// pauses long enough to end it, while the broker refuses one message in twenty and a
// replica restarts halfway. Every committed message must be confirmed and end delivered;
// a flow must have been seen, and none may be left once the pipelines stop.
func TestFlowingPipelinesLoseNothingWhileProducersStartAndStop(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pub := newFakePublisher(func(_ context.Context, m router.Message) error {
		if rand.IntN(20) == 0 {
			return errRefused
		}
		return nil
	})
	cfg := func(i int) dispatch.PipelineConfig {
		return dispatch.PipelineConfig{Owner: fmt.Sprintf("replica-%d", i), BatchSize: 20, PollInterval: 200 * time.Millisecond,
			BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxAttempts: 1000,
			FlowRate: 100} // what 8 producers surely exceed on a loaded 2-CPU machine
	}
	rec := newRecorder()
	stops := make([]func(), 3)
	replica := func(i int) func() { // a pipeline and its replica's listener
		p := pipeline(t, f, cfg(i), pub, rec)
		startListener(t, f, newRecorder(), p)
		return run(t, p)
	}
	for i := range stops {
		stops[i] = replica(i)
	}

	var committed sync.Map // id → true
	var count atomic.Int64
	var sawFlow atomic.Bool
	produce := func(ctx context.Context, n int) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					var id int64
					err := pgx.BeginFunc(ctx, f.pg.Pool, func(tx pgx.Tx) error {
						return tx.QueryRow(ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
							VALUES ('orders', 'events', $1, 'x') RETURNING id`, fmt.Sprint(i%13)).Scan(&id)
					})
					if err != nil {
						t.Error(err)
						return
					}
					committed.Store(id, true)
					count.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	for burst := range 4 {
		produce(f.ctx, 1500)
		if f.flowHolders(t, "orders") > 0 {
			sawFlow.Store(true)
		}
		if burst == 1 {
			stops[0]() // a replica goes away, and another takes its place
			replica(3)
		}
		// A pause long enough for a flow to end (flowLinger), so that the next burst
		// meets parked pipelines and notifications again.
		waitFor(t, 10*time.Second, "no flow lock held between bursts", func() bool { return f.flowHolders(t, "orders") == 0 })
	}

	total := int(count.Load())
	waitFor(t, time.Minute, "every committed message delivered", func() bool { return f.counts(t)["delivered"] == total })
	confirmed := pub.confirmedIDs()
	missing := 0
	committed.Range(func(k, _ any) bool {
		if confirmed[k.(int64)] == 0 {
			missing++
		}
		return true
	})
	if missing > 0 || f.counts(t)["delivered"] != total {
		t.Fatalf("%d of %d committed messages never confirmed; table %v", missing, total, f.counts(t))
	}
	if !sawFlow.Load() {
		t.Errorf("no pipeline flowed during four bursts of 1,500 messages from 8 producers")
	}
	// Every flow reports its start and its end: no flow lock is held any more, and the
	// end of the last one is reported just after its release.
	starts, ends := 0, 0
	flows := func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		starts, ends = 0, 0
		for _, e := range rec.events {
			if c, ok := e.(events.FlowChanged); ok && c.Stream == "orders" {
				if c.Flowing {
					starts++
				} else {
					ends++
				}
			}
		}
		return starts == ends
	}
	waitFor(t, 10*time.Second, "every flow's end reported", flows)
	if starts == 0 || starts != ends {
		t.Errorf("%d flows reported started and %d ended; want as many of each, at least one", starts, ends)
	}
}
