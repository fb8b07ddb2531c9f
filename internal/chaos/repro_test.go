//go:build linux

package chaos_test

import (
	"context"

	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/discard"
	"github.com/outboxd/outboxd/store"
)

// pausedStore is the real store, except that one acknowledgement waits, as a replica
// stopped (SIGSTOP, a long GC pause, a frozen VM) in the middle of its write-back
// would: it starts, the process freezes until the write-back's deadline has passed,
// then it goes on. Everything else, and the acknowledgement itself, is the real store
// against the real database.
type pausedStore struct {
	*store.Store
	paused  chan store.Token // receives the token of the paused write-back
	release chan struct{}    // closed to let it go on
	once    atomic.Bool      // only the first acknowledgement pauses
}

func (s *pausedStore) Ack(ctx context.Context, token store.Token, ids []int64) (store.AckResult, error) {
	if s.once.CompareAndSwap(false, true) {
		s.paused <- token
		<-ctx.Done() // frozen past the write-back's deadline …
		<-s.release  // … while the test lets another replica take the rows over
	}
	return s.Store.Ack(ctx, token, ids)
}

// iterations records the pipeline's events.
type iterations chan events.Iteration

func (c iterations) Emit(e events.Event) {
	if it, ok := e.(events.Iteration); ok {
		c <- it
	}
}

// TestAWriteBackDelayedPastItsDeadlineIsStillJudgedByItsLease holds the fix of finding F1
// (docs/chaos.md): a write-back whose deadline passed while the replica was paused used
// never to be presented to the database. What the lease decides is then lost: rows another replica took over
// are not counted as lease conflicts (duplicates appear with no conflict counted), and
// rows nobody took over stay leased until they expire and are published a second time,
// although their lease token still matched.
func TestAWriteBackDelayedPastItsDeadlineIsStillJudgedByItsLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		takeOver bool // another replica reclaims, claims and delivers the rows meanwhile
	}{
		{"rows another replica took over are refused and counted as lease conflicts", true},
		{"rows nobody took over are acknowledged, so they are not published twice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pg := testenv.NewPG(t)
			st, err := store.New(pg.Pool, pg.Table)
			must(t, err)
			const n = 5
			_, err = pg.Pool.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, payload)
				SELECT 's', 't', 'x' FROM generate_series(1, $1)`, n)
			must(t, err)

			paused := &pausedStore{Store: st, paused: make(chan store.Token, 1), release: make(chan struct{})}
			pub, err := discard.New("discard", discard.Options{}, nil)
			must(t, err)
			its := make(iterations, 16)
			const lease = time.Second
			p, err := dispatch.NewPipeline(dispatch.PipelineConfig{Stream: "s", Owner: "stale", LeaseTTL: lease,
				PublishTimeout: lease / 2, PollInterval: time.Hour}, paused, pub, its, nil)
			must(t, err)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			defer func() { stop(); <-done }() //nolint:errcheck // how Run ended is not what this test asks

			token := <-paused.paused // published; the write-back has begun and is frozen
			// Past the write-back's deadline, and the lease has expired in the database.
			var expired bool
			for !expired {
				must(t, pg.Pool.QueryRow(ctx, `SELECT bool_and(lease_until < now()) FROM `+pg.Table.Qualified()).Scan(&expired))
				time.Sleep(20 * time.Millisecond)
			}
			if tc.takeOver {
				reclaimed, err := st.Reclaim(ctx, 100)
				must(t, err)
				other, err := st.Claim(ctx, "s", 100, "other", time.Minute, store.Position{})
				must(t, err)
				res, err := st.Ack(ctx, other.Token, other.IDs())
				must(t, err)
				if len(reclaimed) != n || res.Changed != n {
					t.Fatalf("take-over: reclaimed %d, other replica acknowledged %d; want %d each", len(reclaimed), res.Changed, n)
				}
			}
			close(paused.release)

			it := <-its
			var status string
			var leased int
			must(t, pg.Pool.QueryRow(ctx, `SELECT min(status), count(*) FILTER (WHERE lease_token = $1) FROM `+pg.Table.Qualified(),
				token[:]).Scan(&status, &leased))
			t.Logf("the frozen write-back: published %d, lease conflicts %d, error %v; rows now %s, %d still leased under its token",
				it.Published, it.LeaseConflicts, it.Err, status, leased)
			if it.Err != nil {
				t.Errorf("the write-back was never presented to the database: %v", it.Err)
			}
			if tc.takeOver && it.LeaseConflicts != n {
				t.Errorf("lease conflicts %d; want %d: every row had moved on to another replica", it.LeaseConflicts, n)
			}
			if !tc.takeOver && (it.Published != n || leased != 0) {
				t.Errorf("acknowledged %d of %d rows whose token still matched; %d stay leased and will be published again",
					it.Published, n, leased)
			}
		})
	}
}
