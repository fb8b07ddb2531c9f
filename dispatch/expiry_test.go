package dispatch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// expiryCounter counts MessageExpired events per id; it never blocks.
type expiryCounter struct {
	mu  sync.Mutex
	ids map[int64]int
}

func (c *expiryCounter) Emit(e events.Event) {
	if x, ok := e.(events.MessageExpired); ok {
		c.mu.Lock()
		c.ids[x.ID]++
		c.mu.Unlock()
	}
}

// Two replicas drain one stream whose broker is unreachable at first and then refuses
// or drops some publishes, while a quarter of the messages expire (their own
// expires_at) and the stream's ttl expires every message not delivered within 4s. Every
// row ends delivered or expired, never both: no broker confirmed an expired row, every
// delivered row was confirmed, and each expiry was reported once.
func TestTwoReplicasWithFailuresDeliverOrExpireEveryRowAndPublishNoExpiredOne(t *testing.T) {
	t.Parallel()
	f := setup(t)
	st, err := store.New(f.pg.Pool, f.pg.Table, store.WithTTL("orders", 4*time.Second))
	must(t, err)
	f.store = st
	const total = 4000
	// Every fourth row expires on its own, 0 to 1.9s from now; keys as f.insert.
	_, err = f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload, expires_at)
		SELECT 'orders', 'events', 'k' || (g % 7), convert_to('m' || g, 'UTF8'),
		       CASE WHEN g % 4 = 0 THEN now() + (g % 20) * interval '100 milliseconds' END
		FROM generate_series(1, $1) g`, total)
	must(t, err)

	var brokerUp atomic.Bool
	time.AfterFunc(time.Second, func() { brokerUp.Store(true) })
	counter := &expiryCounter{ids: map[int64]int{}}
	pubs := make([]*fakePublisher, 2)
	for r := range pubs {
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		var rmu sync.Mutex
		pubs[r] = newFakePublisher(func(ctx context.Context, m router.Message) error {
			if !brokerUp.Load() {
				return router.Unreachable(fmt.Errorf("dial tcp: connection refused"))
			}
			rmu.Lock()
			x := rng.IntN(100)
			rmu.Unlock()
			switch {
			case x < 10:
				return router.Retryable(errRefused)
			case x < 13:
				return router.Unreachable(fmt.Errorf("dial tcp: connection refused"))
			case x < 15:
				time.Sleep(2 * time.Millisecond) // a slow broker
			}
			return nil
		})
		p := pipeline(t, f, dispatch.PipelineConfig{
			Owner: fmt.Sprintf("replica-%d", r), BatchSize: 25, Concurrency: 2,
			BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second, MaxAttempts: 1000,
			BreakerPause: 50 * time.Millisecond, BreakerMaxPause: 200 * time.Millisecond,
		}, pubs[r], counter)
		stop := run(t, p)
		defer stop()
	}
	// A claim reports what its sweep expired once the claim has returned, just after the
	// sweep committed: wait for the reports too, or a read between the two misses one.
	waitFor(t, 2*time.Minute, "every row delivered or expired, each expiry reported", func() bool {
		c := f.counts(t)
		counter.mu.Lock()
		reported := len(counter.ids)
		counter.mu.Unlock()
		return c["delivered"]+c["expired"] == total && reported >= c["expired"]
	})

	confirmed := map[int64]int{}
	for _, p := range pubs {
		for id, n := range p.confirmedIDs() {
			confirmed[id] += n
		}
	}
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT id, status FROM `+f.pg.Table.Qualified())
	must(t, err)
	var delivered, expired int
	for rows.Next() {
		var id int64
		var status string
		must(t, rows.Scan(&id, &status))
		switch status {
		case "delivered":
			delivered++
			if confirmed[id] == 0 {
				t.Errorf("row %d is delivered but no broker confirmed it", id)
			}
		case "expired":
			expired++
			if confirmed[id] != 0 {
				t.Errorf("row %d is expired but a broker confirmed it %d time(s)", id, confirmed[id])
			}
		}
	}
	must(t, rows.Err())
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for id, n := range counter.ids {
		if n != 1 {
			t.Errorf("row %d reported expired %d times", id, n)
		}
	}
	if delivered+expired != total || delivered == 0 || expired == 0 || len(counter.ids) != expired {
		t.Fatalf("delivered %d, expired %d (%d reported) of %d: want both, every row, each expiry reported",
			delivered, expired, len(counter.ids), total)
	}
	t.Logf("delivered %d, expired %d of %d", delivered, expired, total)
}
