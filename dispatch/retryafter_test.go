package dispatch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/router"
)

func TestARetryAfterHintDelaysTheNextAttemptByAtLeastTheHint(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 1)
	const hint = 2 * time.Second
	var mu sync.Mutex
	var calls []time.Time
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) == 1 {
			return router.RetryableAfter(fmt.Errorf("503 Service Unavailable"), hint)
		}
		return nil
	})
	// A backoff of a few milliseconds: only the hint can make the pause seconds long.
	run(t, pipeline(t, f, dispatch.PipelineConfig{
		BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 5,
	}, pub, nil))
	waitFor(t, 30*time.Second, "the row delivered", func() bool { return f.counts(t)["delivered"] == 1 })

	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("%d publishes, want the refused one and the one after the hint", len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < hint {
		t.Fatalf("the second attempt came %v after the first; the broker asked for %v", gap, hint)
	}
}

func TestThreeDispatchersHonouringRetryAfterHintsDeliverEveryRow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 3000
	ids := f.insert(t, "orders", total)

	// Each replica's broker refuses now and then with a short Retry-After hint, or
	// without one, or cannot be reached; the hints must not lose or strand a row.
	var wg sync.WaitGroup
	pubs := make([]*fakePublisher, 3)
	var hinted sync.Map // ids refused with a hint
	for r := range pubs {
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		var rmu sync.Mutex
		pubs[r] = newFakePublisher(func(ctx context.Context, m router.Message) error {
			rmu.Lock()
			x, wait := rng.IntN(100), time.Duration(1+rng.IntN(30))*time.Millisecond
			rmu.Unlock()
			switch {
			case x < 8:
				hinted.Store(m.ID, true)
				return router.RetryableAfter(fmt.Errorf("429 Too Many Requests"), wait)
			case x < 11:
				return router.Retryable(errRefused)
			case x < 14:
				return router.Unreachable(fmt.Errorf("dial tcp: connection refused"))
			}
			return nil
		})
		p := pipeline(t, f, dispatch.PipelineConfig{
			Owner: fmt.Sprintf("replica-%d", r), BatchSize: 50, Concurrency: 2,
			BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 100,
			BreakerPause: 5 * time.Millisecond, BreakerMaxPause: 20 * time.Millisecond,
		}, pubs[r], nil)
		wg.Add(1)
		stop := run(t, p)
		defer func() { stop(); wg.Done() }()
	}
	waitFor(t, 2*time.Minute, "every row delivered", func() bool { return f.counts(t)["delivered"] == total })

	confirmed := confirmedBy(pubs)
	for _, id := range ids {
		if confirmed[id] == 0 {
			t.Fatalf("row %d is delivered in the table but no broker confirmed it", id)
		}
	}
	if len(confirmed) != total {
		t.Fatalf("brokers confirmed %d distinct ids, inserted %d", len(confirmed), total)
	}
	if c := f.counts(t); len(c) != 1 {
		t.Fatalf("rows by status: %v; want every row delivered", c)
	}
	n := 0
	hinted.Range(func(any, any) bool { n++; return true })
	if n == 0 {
		t.Fatal("no message was refused with a hint: the injected failures did not happen")
	}
}
