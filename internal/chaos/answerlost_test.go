//go:build linux

package chaos_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/discard"
	"github.com/outboxd/outboxd/store"
)

// answerLostStore is the real store, except that the first acknowledgement's answer is
// lost: the database applies it, then the replica freezes until the write-back's
// deadline has passed, as one stopped while it waited for the answer would.
type answerLostStore struct {
	*store.Store
	once atomic.Bool
}

func (s *answerLostStore) Ack(ctx context.Context, token store.Token, ids []int64) (store.AckResult, error) {
	if s.once.CompareAndSwap(false, true) {
		if _, err := s.Store.Ack(context.WithoutCancel(ctx), token, ids); err != nil {
			return store.AckResult{}, err
		}
		<-ctx.Done() // frozen until the deadline passed: the answer never arrives
		return store.AckResult{}, ctx.Err()
	}
	return s.Store.Ack(ctx, token, ids)
}

// TestAnAcknowledgementWhoseAnswerWasLostIsNotCountedAsALeaseConflict holds the fix of
// finding F2 (docs/chaos.md): when the answer to an acknowledgement the database applied
// is lost while the replica is frozen, the write-back is sent once more (F1's fix); the
// second try finds the rows already written back by the first. They used to be refused
// and counted as lease conflicts, although no other replica ever took the rows; now the
// second try recognises them as delivered by this replica and counts them as published.
func TestAnAcknowledgementWhoseAnswerWasLostIsNotCountedAsALeaseConflict(t *testing.T) {
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
	pub, err := discard.New("discard", discard.Options{}, nil)
	must(t, err)
	its := make(iterations, 16)
	const lease = time.Second
	p, err := dispatch.NewPipeline(dispatch.PipelineConfig{Stream: "s", Owner: "only", LeaseTTL: lease,
		PublishTimeout: lease / 2, PollInterval: time.Hour}, &answerLostStore{Store: st}, pub, its, nil)
	must(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() { stop(); <-done }() //nolint:errcheck // how Run ended is not what this test asks

	it := <-its
	var delivered int
	must(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pg.Table.Qualified()+` WHERE status = 'delivered'`).Scan(&delivered))
	t.Logf("the acknowledgement whose answer was lost: published %d, lease conflicts %d, error %v; %d rows delivered",
		it.Published, it.LeaseConflicts, it.Err, delivered)
	if delivered != n {
		t.Fatalf("%d of %d rows delivered: the acknowledgement did not take effect", delivered, n)
	}
	if it.LeaseConflicts != 0 {
		t.Errorf("%d lease conflicts counted for rows this replica itself acknowledged; nobody else ever held them", it.LeaseConflicts)
	}
	if it.Published != n {
		t.Errorf("published %d; want %d: the first try delivered them, and only its answer was lost", it.Published, n)
	}
}
