package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// pacedPublisher confirms every message of a batch after a pause, and notes the order
// in which ids were confirmed.
type pacedPublisher struct {
	pause time.Duration
	mu    sync.Mutex
	order []int64
}

func (p *pacedPublisher) Publish(ctx context.Context, msgs []router.Message) []error {
	errs := make([]error, len(msgs))
	select {
	case <-time.After(p.pause):
	case <-ctx.Done():
		for i := range errs {
			errs[i] = router.Canceled(ctx.Err())
		}
		return errs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.order = append(p.order, m.ID)
	}
	return errs
}

// confirmedBefore is how many ids were confirmed before id, -1 while id is not.
func (p *pacedPublisher) confirmedBefore(id int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Index(p.order, id)
}

func (p *pacedPublisher) confirmed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.order)
}

// While a backlog drains, each claim starts where the previous one ended
// (store.Position), so a row that lands behind that position, here one available an
// hour ago and committed mid-drain, is found only by a claim from the start. The drain
// makes one every store.RescanEvery: the row must go out while most of the backlog still
// waits, not after all of it.
func TestARowCommittedBehindADrainsPositionGoesOutWhileTheBacklogStillDrains(t *testing.T) {
	t.Parallel()
	for _, transaction := range []bool{true, false} {
		name := map[bool]string{true: "claims held in a transaction", false: "claims by lease"}[transaction]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			const total = 4000
			f.insert(t, "orders", total)
			// 80 batches of 50, two at a time, 25 ms each: a drain of about a second.
			pub := &pacedPublisher{pause: 25 * time.Millisecond}
			run(t, pipeline(t, f, dispatch.PipelineConfig{BatchSize: 50, Concurrency: 2, Transaction: transaction,
				PollInterval: time.Hour}, pub, nil))
			waitFor(t, 30*time.Second, "the drain under way", func() bool { return pub.confirmed() >= 400 })
			var late int64
			must(t, f.pg.Pool.QueryRow(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload, available_at)
				VALUES ('orders', 'events', '\x00', now() - interval '1 hour') RETURNING id`).Scan(&late))
			waitFor(t, 30*time.Second, "the late row confirmed", func() bool { return pub.confirmedBefore(late) >= 0 })
			before := pub.confirmedBefore(late)
			// The late row comes within about RescanEvery (8 batches' worth of the
			// drain's pace); without a claim from the start it would follow all 4,000.
			if before > total-1500 {
				t.Fatalf("the row committed behind the drain's position went out after %d of the %d backlog rows", before, total)
			}
			waitFor(t, 30*time.Second, "the backlog delivered", func() bool { return f.counts(t)["delivered"] == total+1 })
			t.Logf("the late row went out after %d of %d backlog rows", before, total)
		})
	}
}

// Claims that resume from a position must still deliver every committed row: rows land
// behind positions all the time here. Producers keep their transactions open for up to
// 150 ms after the INSERT (their rows' available_at is the INSERT's time, so they commit
// behind rows claimed meanwhile) and roll one in eight back; some insert rows available
// seconds ago; the broker refuses some messages (retried later) and sessions holding the
// table are killed mid-publish (their held claims roll back). Two pipelines hold claims
// in transactions and one leases, on one stream. Every committed row must be confirmed
// by the broker and end delivered, and no rolled-back row may be published.
func TestEveryCommittedRowIsDeliveredWhileRowsLandBehindTheDrainsPositions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const backlog = 15000 // still draining while the producers run
	f.insert(t, "orders", backlog)
	// The pipelines claim on a pool of their own, the only sessions killed: a session
	// picked by the locks it held a moment ago may be serving someone else by then.
	cfg := f.pg.Pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = "claims"
	claims, err := pgxpool.NewWithConfig(context.Background(), cfg)
	must(t, err)
	t.Cleanup(claims.Close) // after the pipelines, registered later, have stopped
	st, err := store.New(claims, f.pg.Table)
	must(t, err)
	pf := *f
	pf.store = st

	var kills atomic.Int64
	var pubs []*fakePublisher
	for i, transaction := range []bool{true, true, false} {
		pub := dicePublisher(uint64(i), 11, func(ctx context.Context, m router.Message, x int) error {
			switch {
			case x < 40:
				return router.Retryable(errRefused)
			case x < 42:
				kills.Add(f.killTableSessions("claims"))
			}
			return nil
		})
		pubs = append(pubs, pub)
		run(t, pipeline(t, &pf, dispatch.PipelineConfig{
			Owner: fmt.Sprintf("replica-%d", i), BatchSize: 50, Concurrency: 2, Transaction: transaction,
			BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 1000,
			BreakerPause: 5 * time.Millisecond, BreakerMaxPause: 20 * time.Millisecond,
		}, pub, nil))
	}

	var committed, rolledBack sync.Map
	var produced atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
				if err := produce(f.pg.Pool, f, rng, &committed, &rolledBack, &produced); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	n := backlog
	committed.Range(func(any, any) bool { n++; return true })
	waitFor(t, 2*time.Minute, "every committed row delivered", func() bool { return f.counts(t)["delivered"] == n })

	rows, err := f.pg.Pool.Query(f.ctx, `SELECT id FROM `+f.pg.Table.Qualified())
	must(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	must(t, err)
	confirmed := confirmedBy(pubs)
	for _, id := range ids {
		if confirmed[id] == 0 {
			t.Fatalf("row %d is delivered in the table but no broker confirmed it", id)
		}
	}
	phantoms := 0
	rolledBack.Range(func(id, _ any) bool {
		if confirmed[id.(int64)] > 0 {
			phantoms++
		}
		return true
	})
	if phantoms > 0 {
		t.Fatalf("%d rolled-back rows were published", phantoms)
	}
	if kills.Load() == 0 {
		t.Fatal("no session was killed: the injected failure did not happen")
	}
	t.Logf("%d rows produced in open transactions, %d committed in all, %d sessions killed", produced.Load(), n, kills.Load())
}

// produce inserts a few rows into f's table in one transaction of pool, some available seconds ago, holds the
// transaction open a while and commits it, or one time in eight rolls it back.
func produce(pool *pgxpool.Pool, f *fixture, rng *rand.Rand, committed, rolledBack *sync.Map, produced *atomic.Int64) error {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload, available_at)
		SELECT 'orders', 'events', '\x01', statement_timestamp() - $2 * interval '1 millisecond'
		FROM generate_series(1, $1) RETURNING id`, 1+rng.IntN(20), rng.IntN(2)*rng.IntN(5000))
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	produced.Add(int64(len(ids)))
	time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
	into := committed
	if rng.IntN(8) == 0 {
		into = rolledBack
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
	} else if err := tx.Commit(ctx); err != nil {
		return errors.Join(errors.New("commit a producer's rows"), err)
	}
	for _, id := range ids {
		into.Store(id, true)
	}
	return nil
}
