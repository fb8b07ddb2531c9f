package dispatch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
)

// Transaction mode on one table with a lease-mode pipeline beside it: broker refusals
// and unreachable brokers, connections killed while their batch is publishing
// (pg_terminate_backend of every session holding the table), and pipelines shut down and
// replaced mid-publish. Every row must end delivered, each confirmed by a broker; no row
// may spend more attempts than the broker refused it; and no write-back may be refused
// (a held row is no one else's to change).
func TestTransactionModeDeliversEveryRowThroughKilledConnectionsAndRestarts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 4000
	ids := f.insert(t, "orders", total)

	var kills atomic.Int64
	var refusedMu sync.Mutex
	refused := map[int64]int{} // retryable refusals per row: the attempts it may spend
	rec := newRecorder()
	newPub := func(seed uint64) *fakePublisher {
		return dicePublisher(seed, 7, func(ctx context.Context, m router.Message, x int) error {
			switch {
			case x < 60:
				refusedMu.Lock()
				refused[m.ID]++
				refusedMu.Unlock()
				return router.Retryable(errRefused)
			case x < 100:
				return router.Unreachable(fmt.Errorf("dial tcp: connection refused"))
			case x < 103:
				// Kill every session holding the table: this batch's transaction among them.
				kills.Add(f.killTableSessions(""))
			case x < 106:
				select { // a slow publish, for restarts to catch in flight
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					return router.Canceled(ctx.Err())
				}
			}
			return nil
		})
	}
	var pubsMu sync.Mutex
	var pubs []*fakePublisher
	start := func(i int, transaction bool) func() {
		pub := newPub(uint64(i))
		pubsMu.Lock()
		pubs = append(pubs, pub)
		pubsMu.Unlock()
		return run(t, pipeline(t, f, dispatch.PipelineConfig{
			Owner: fmt.Sprintf("replica-%d", i), BatchSize: 50, Concurrency: 2, Transaction: transaction,
			BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 1000,
			BreakerPause: 5 * time.Millisecond, BreakerMaxPause: 20 * time.Millisecond,
			ShutdownGrace: 5 * time.Millisecond,
		}, pub, rec))
	}
	stops := []func(){start(0, true), start(1, true), start(2, true), start(3, false)}
	// Restart a transaction-mode pipeline now and then, as a process would be.
	restarts := 0
	deadline := time.Now().Add(2 * time.Minute)
	for next := 4; f.counts(t)["delivered"] < total; next++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %v", f.counts(t))
		}
		time.Sleep(50 * time.Millisecond)
		if restarts < 10 {
			k := next % 3
			stops[k]()
			stops[k] = start(next, true)
			restarts++
		}
	}
	for _, stop := range stops {
		stop()
	}

	confirmed := confirmedBy(pubs)
	for _, id := range ids {
		if confirmed[id] == 0 {
			t.Fatalf("row %d is delivered in the table but no broker confirmed it", id)
		}
	}
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT id, attempts FROM `+f.pg.Table.Qualified())
	must(t, err)
	for rows.Next() {
		var id int64
		var attempts int
		must(t, rows.Scan(&id, &attempts))
		if attempts > refused[id] {
			t.Fatalf("row %d spent %d attempts; the broker refused it %d times", id, attempts, refused[id])
		}
	}
	must(t, rows.Err())
	conflicts := 0
	for _, it := range rec.iterations() {
		conflicts += it.LeaseConflicts
	}
	if conflicts > 0 {
		t.Fatalf("%d write-backs were refused: some row was claimed by two batches at once", conflicts)
	}
	if kills.Load() == 0 || len(refused) == 0 {
		t.Fatalf("the injected failures did not happen: %d sessions killed, %d rows refused", kills.Load(), len(refused))
	}
	t.Logf("%d sessions killed, %d restarts, %d confirmed publishes for %d rows", kills.Load(), restarts, sum(confirmed), total)
}

func sum(m map[int64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// A shutdown in transaction mode cancels the publishes in flight after the grace and
// rolls their batches back: every row pending again, no attempt spent, and another
// instance delivers them all.
func TestTransactionModeShutdownHandsEveryUnpublishedRowBack(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 500
	f.insert(t, "orders", total)
	started := make(chan struct{}, total)
	hanging := newFakePublisher(func(ctx context.Context, m router.Message) error {
		started <- struct{}{}
		<-ctx.Done()
		return router.Canceled(ctx.Err())
	})
	first := pipeline(t, f, dispatch.PipelineConfig{Owner: "first", BatchSize: 50, Concurrency: 3, Transaction: true,
		ShutdownGrace: 50 * time.Millisecond}, hanging, nil)
	stop := run(t, first)
	for range 3 { // the first message of each of three batches publishing at once
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("three batches never started publishing")
		}
	}
	stop()
	if c := f.counts(t); c["pending"] != total {
		t.Fatalf("after shutdown: %v; want every row pending", c)
	}
	var attempts, locked int
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+f.pg.Table.Qualified()).Scan(&attempts))
	if attempts != 0 {
		t.Fatalf("a shutdown spent %d attempts", attempts)
	}
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM (SELECT 1 FROM `+f.pg.Table.Qualified()+
		` FOR UPDATE SKIP LOCKED) x`).Scan(&locked))
	if locked != total {
		t.Fatalf("after shutdown %d rows are still locked", total-locked)
	}

	second := newFakePublisher(nil)
	run(t, pipeline(t, f, dispatch.PipelineConfig{Owner: "second", BatchSize: 100, Transaction: true}, second, nil))
	waitFor(t, 30*time.Second, "the second instance delivering the rest", func() bool { return f.counts(t)["delivered"] == total })
}

// An ordered stream's claim relies on leased heads (store/ordered.go): a pipeline that
// would hold its claims in a transaction is refused, never run out of order.
func TestPipelineConfigRefusesAnOrderedStreamInTransactionMode(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d, err := discard.New("d", discard.Options{}, nil)
	must(t, err)
	rt, err := router.New([]router.Route{{Stream: "s", DriverName: "d", Driver: d}})
	must(t, err)
	pub, err := rt.Publisher("s") // publishes in key order
	must(t, err)
	_, err = dispatch.NewPipeline(dispatch.PipelineConfig{Stream: "s", Owner: "o", Ordered: true, Transaction: true},
		f.store, pub, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "an ordered stream claims by lease") {
		t.Fatalf("err = %v", err)
	}
}
