package dispatch_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// poisonDriver is a broker that refuses, before anything is sent (router.Checker), every
// message of the topic "poison", and records the ids it took, in the order it took them.
type poisonDriver struct {
	mu    sync.Mutex
	taken []int64
}

func (d *poisonDriver) Check(m *router.Message) error {
	if m.Topic == "poison" {
		return router.Permanent(errors.New("the broker will never take a poisoned message"))
	}
	return nil
}

func (d *poisonDriver) Publish(ctx context.Context, msgs []router.Message) []error {
	errs := make([]error, len(msgs))
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, m := range msgs {
		if errs[i] = d.Check(&m); errs[i] == nil {
			d.taken = append(d.taken, m.ID)
		}
	}
	return errs
}

func (d *poisonDriver) Close() error { return nil }

// takenOf returns the ids of want the broker took, in the order it took them.
func (d *poisonDriver) takenOf(want []int64) []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int64
	for _, id := range d.taken {
		if slices.Contains(want, id) {
			out = append(out, id)
		}
	}
	return out
}

// sampleBlocked takes one sample and returns its event per stream.
func sampleBlocked(t *testing.T, ctx context.Context, s *dispatch.Sampler, rec *recorder, streams int) map[string]events.BlockedKeys {
	t.Helper()
	must(t, s.Sample(ctx))
	got := map[string]events.BlockedKeys{}
	for len(got) < streams {
		e := rec.await(t, time.Second, "blocked-key events", func(e events.Event) bool {
			_, ok := e.(events.BlockedKeys)
			return ok
		}).(events.BlockedKeys)
		got[e.Stream] = e
	}
	return got
}

func (f *fixture) insertKeyed(t *testing.T, stream, topic, key string, n int) []int64 {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT $1, $2, $3, convert_to('m' || g, 'UTF8') FROM generate_series(1, $4) g ORDER BY g RETURNING id`,
		stream, topic, key, n)
	must(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		must(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	must(t, rows.Err())
	slices.Sort(ids)
	return ids
}

func (f *fixture) statusOf(t *testing.T, ids []int64) map[string]int {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT status, count(*) FROM `+f.pg.Table.Qualified()+` WHERE id = ANY ($1) GROUP BY status`, ids)
	must(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		must(t, rows.Scan(&s, &n))
		out[s] = n
	}
	must(t, rows.Err())
	return out
}

// TestAFailedHeadBlocksOnlyItsKeyTheSamplerShowsItAndASkipReleasesTheRestInOrder runs an
// ordered stream whose key "stuck" starts with a message the broker refuses for good:
// its successors wait while the other keys are delivered, the blocked-key sample counts
// the key and the messages behind it, and a skip of the head releases them, in order,
// after which the sample reads zero again.
func TestAFailedHeadBlocksOnlyItsKeyTheSamplerShowsItAndASkipReleasesTheRestInOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const waiting = 6
	head := f.insertKeyed(t, "orders", "poison", "stuck", 1)[0]
	behind := f.insertKeyed(t, "orders", "orders.updated", "stuck", waiting)
	others := append(f.insertKeyed(t, "orders", "orders.created", "free-1", 5), f.insertKeyed(t, "orders", "orders.created", "free-2", 5)...)

	drv := &poisonDriver{}
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "poison", Driver: drv}})
	must(t, err)
	pub, err := rt.Publisher("orders")
	must(t, err)
	rec := newRecorder()
	p, err := dispatch.NewPipeline(dispatch.PipelineConfig{
		Stream: "orders", Owner: "blocked-test", Ordered: true, BatchSize: 4, PollInterval: 20 * time.Millisecond,
	}, f.store, pub, rec, nil)
	must(t, err)
	stop := run(t, p)
	defer stop()

	waitFor(t, 30*time.Second, "the other keys delivered and the head failed", func() bool {
		return f.statusOf(t, others)["delivered"] == len(others) && f.statusOf(t, []int64{head})["failed"] == 1
	})
	if got := f.statusOf(t, behind); got["pending"] != waiting {
		t.Fatalf("the messages behind the failed head: %v; want all %d pending", got, waiting)
	}
	if taken := drv.takenOf(behind); len(taken) > 0 {
		t.Fatalf("the broker took %v although their head failed", taken)
	}

	sampler := blockedSampler([]string{"orders", "idle"}, f.store, rec)
	got := sampleBlocked(t, f.ctx, sampler, rec, 2)
	if want := (events.BlockedKeys{Stream: "orders", Keys: 1, Waiting: waiting}); got["orders"] != want {
		t.Fatalf("sample with a failed head: %+v, want %+v", got["orders"], want)
	}
	if want := (events.BlockedKeys{Stream: "idle"}); got["idle"] != want {
		t.Fatalf("an ordered stream without rows must report zeros, not be absent: %+v", got["idle"])
	}

	n, err := f.store.Skip(f.ctx, []int64{head})
	must(t, err)
	if n != 1 {
		t.Fatalf("skip of the failed head skipped %d rows, want 1", n)
	}
	waitFor(t, 30*time.Second, "the messages behind the skipped head delivered", func() bool {
		return f.statusOf(t, behind)["delivered"] == waiting
	})
	if taken := drv.takenOf(behind); !slices.Equal(taken, behind) {
		t.Fatalf("after the skip the broker took %v, want %v (every one, once, in id order)", taken, behind)
	}
	got = sampleBlocked(t, f.ctx, sampler, rec, 2)
	if want := (events.BlockedKeys{Stream: "orders"}); got["orders"] != want {
		t.Fatalf("sample after the skip: %+v, want zeros", got["orders"])
	}
	var skippedAt *time.Time
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT skipped_at FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, head).Scan(&skippedAt))
	if st := f.statusOf(t, []int64{head}); st["failed"] != 1 || skippedAt == nil {
		t.Fatalf("the skipped head: %v, skipped_at %v; want it failed and marked skipped", st, skippedAt)
	}
}

// blockedStore answers Blocked with what the test set and records the streams asked.
type blockedStore struct {
	mu     sync.Mutex
	answer []store.BlockedStream
	err    error
	asked  [][]string
}

func (b *blockedStore) Blocked(_ context.Context, streams []string) ([]store.BlockedStream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, slices.Clone(streams))
	return b.answer, b.err
}

func TestTheBlockedSamplerReportsEveryOrderedStreamEvenOnesTheDatabaseLeftOut(t *testing.T) {
	t.Parallel()
	st := &blockedStore{answer: []store.BlockedStream{{Stream: "b", Keys: 2, Waiting: 40}}}
	rec := newRecorder()
	s := blockedSampler([]string{"a", "b"}, st, rec)
	got := sampleBlocked(t, context.Background(), s, rec, 2)
	if got["a"] != (events.BlockedKeys{Stream: "a"}) || got["b"] != (events.BlockedKeys{Stream: "b", Keys: 2, Waiting: 40}) {
		t.Fatalf("samples %+v", got)
	}

	st.mu.Lock()
	st.err = errors.New("connection refused")
	st.mu.Unlock()
	if err := s.Sample(context.Background()); err == nil {
		t.Fatal("a failed sample reported no error")
	}
	if err := blockedSampler(nil, st, rec).Sample(context.Background()); err != nil {
		t.Fatalf("a sampler of no stream: %v", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.asked) != 2 || !slices.Equal(st.asked[0], []string{"a", "b"}) {
		t.Fatalf("the database was asked about %v; want a, b twice and nothing for a sampler of no stream", st.asked)
	}
}

// blockedSampler is a sampler of the blocked-key probe alone.
func blockedSampler(ordered []string, st dispatch.BlockedStore, rec *recorder) *dispatch.Sampler {
	return dispatch.NewSampler(dispatch.SamplerConfig{Interval: time.Second,
		Probes: []dispatch.Probe{dispatch.BlockedProbe(ordered, st)}}, rec, nil)
}
