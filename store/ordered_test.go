package store_test

import (
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

// insertKeyed writes one row per key in keys, in that order, each in its own statement
// so ids follow the slice. A "" key is written as NULL (no key).
func (f *fixture) insertKeyed(t testing.TB, stream string, keys ...string) []int64 {
	t.Helper()
	ids := make([]int64, len(keys))
	for i, k := range keys {
		var key any = k
		if k == "" {
			key = nil
		}
		if err := f.pg.Pool.QueryRow(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
			VALUES ($1, 't', $2, 'x') RETURNING id`, stream, key).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func (f *fixture) claimOrdered(t testing.TB, cur *store.KeyCursor, limit int) store.Claim {
	t.Helper()
	c, err := f.store.ClaimOrdered(f.ctx, "s", limit, "me", time.Minute, cur)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ids(c store.Claim) []int64 { return c.IDs() }

func same(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOrderedClaimTakesAKeyOnlyFromItsHeadAndNeverBehindAHeldRow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// a1 a2 b1 _ a3 b2: "_" has no key.
	r := f.insertKeyed(t, "s", "a", "a", "b", "", "a", "b")
	a1, a2, b1, none, a3, b2 := r[0], r[1], r[2], r[3], r[4], r[5]
	var cur store.KeyCursor

	// Everything is due: both keys' whole runs and the keyless row, in id order.
	first := f.claimOrdered(t, &cur, 100)
	if !same(ids(first), []int64{a1, a2, b1, none, a3, b2}) {
		t.Fatalf("claim took %v, want every row in id order", ids(first))
	}
	if again := f.claimOrdered(t, &cur, 100); len(again.Messages) != 0 {
		t.Fatalf("a second claim took %v while every key's head is leased", ids(again))
	}

	// a1 delivered; a2 waits out a retry: a3 must wait behind it, b continues.
	if _, err := f.store.Ack(f.ctx, first.Token, []int64{a1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Retry(f.ctx, first.Token, []store.Retry{{ID: a2, Delay: time.Hour, Err: "busy"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, first.Token, []int64{b1, none, a3, b2}); err != nil {
		t.Fatal(err)
	}
	second := f.claimOrdered(t, &cur, 100)
	if !same(ids(second), []int64{b1, none, b2}) {
		t.Fatalf("claim took %v, want b's run and the keyless row (a3 waits behind a2)", ids(second))
	}

	// The batch limit cuts a run, never a head out of it: limit 1 takes b1 alone.
	if _, err := f.store.Release(f.ctx, second.Token, ids(second)); err != nil {
		t.Fatal(err)
	}
	one := f.claimOrdered(t, &store.KeyCursor{}, 1)
	if !same(ids(one), []int64{b1}) {
		t.Fatalf("claim of 1 took %v, want b's head %d", ids(one), b1)
	}
	if more := f.claimOrdered(t, &store.KeyCursor{}, 100); !same(ids(more), []int64{none}) {
		t.Fatalf("with b's head leased, a claim took %v, want only the keyless row", ids(more))
	}
}

func TestOrderedClaimSpreadsABatchOverKeysAndResumesAfterTheLastKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var keys []string
	for round := 0; round < 2; round++ {
		keys = append(keys, "k1", "k2", "k3", "k4", "k5", "k6")
	}
	f.insertKeyed(t, "s", keys...)
	var cur store.KeyCursor
	// As many heads as the batch holds: a claim of 2 takes two keys' heads, not one key's run.
	c := f.claimOrdered(t, &cur, 2)
	got := map[string]int{}
	for _, m := range c.Messages {
		got[string(m.Key)]++
	}
	if len(c.Messages) != 2 || len(got) != 2 {
		t.Fatalf("claim of 2 took %d rows over keys %v, want the heads of two keys", len(c.Messages), got)
	}
	// The next claim resumes after the keys just taken, not from the first key again.
	next := f.claimOrdered(t, &cur, 2)
	for _, m := range next.Messages {
		if got[string(m.Key)] > 0 {
			t.Fatalf("second claim took key %s again although other keys were waiting", m.Key)
		}
	}
	if len(next.Messages) == 0 {
		t.Fatal("second claim took nothing although four keys were untouched")
	}
}

func TestAFailedHeadBlocksItsKeyUntilSkippedAndIsCounted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.insertKeyed(t, "s", "stuck", "ok", "stuck", "stuck", "ok")
	head, ok1, w1, w2, ok2 := r[0], r[1], r[2], r[3], r[4]
	var cur store.KeyCursor
	c := f.claimOrdered(t, &cur, 100)
	if _, err := f.store.Fail(f.ctx, c.Token, []store.Failure{{ID: head, Err: "poison", Attempted: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, c.Token, []int64{ok1, w1, w2, ok2}); err != nil {
		t.Fatal(err)
	}
	if c := f.claimOrdered(t, &cur, 100); !same(ids(c), []int64{ok1, ok2}) {
		t.Fatalf("claim took %v, want only key ok's rows", ids(c))
	}
	blocked, err := f.store.Blocked(f.ctx, []string{"s", "other"})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.BlockedStream{{Stream: "other"}, {Stream: "s", Keys: 1, Waiting: 2}}
	if len(blocked) != 2 || blocked[0] != want[0] || blocked[1] != want[1] {
		t.Fatalf("blocked %+v, want %+v", blocked, want)
	}

	id, ok, err := f.store.SkipHead(f.ctx, "s", "stuck")
	if err != nil || !ok || id != head {
		t.Fatalf("skip head: %d %v %v, want %d", id, ok, err, head)
	}
	if got := f.row(t, head); got.Status != "failed" || got.LastError == nil || *got.LastError != "poison" {
		t.Fatalf("skipped head is %+v, want failed with its error kept", got)
	}
	if c := f.claimOrdered(t, &store.KeyCursor{}, 100); !same(ids(c), []int64{w1, w2}) {
		t.Fatalf("after the skip, claim took %v, want the waiting rows %v in order", ids(c), []int64{w1, w2})
	}
	blocked, err = f.store.Blocked(f.ctx, []string{"s"})
	if err != nil || len(blocked) != 1 || blocked[0].Keys != 0 || blocked[0].Waiting != 0 {
		t.Fatalf("after the skip: blocked %+v %v, want none", blocked, err)
	}
	// A skipped row is not skipped twice; a leased one is not skipped at all.
	if n, err := f.store.Skip(f.ctx, []int64{head, w1}); err != nil || n != 0 {
		t.Fatalf("skip of a skipped and a leased row: %d %v, want 0", n, err)
	}
}

// TestConcurrentOrderedClaimersDeliverEveryKeyInOrder runs six claimers over 40 keys.
// Each claimer publishes its batch in claim order and, like the dispatcher, stops a key
// at its first failure: the failed row retries and the rest of the key's run goes back
// unpublished. Afterwards every row is delivered once and each key's rows were delivered
// in id order (published_at never decreases along a key).
func TestConcurrentOrderedClaimersDeliverEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const rows, nkeys = 3000, 40
	if _, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT 's', 't', 'k' || (g * 7919 % $2), 'x' FROM generate_series(1, $1) g`, rows, nkeys); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	stop := make(chan struct{})
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			var cur store.KeyCursor
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := f.store.ClaimOrdered(f.ctx, "s", 1+rng.IntN(60), "w", time.Minute, &cur)
				if err != nil {
					errs <- err
					return
				}
				if len(c.Messages) == 0 {
					time.Sleep(2 * time.Millisecond) // a poll interval: another claimer holds the rest
					continue
				}
				var acks, releases []int64
				var retries []store.Retry
				stopped := map[string]bool{}
				for _, m := range c.Messages {
					k := string(m.Key)
					switch {
					case stopped[k]:
						releases = append(releases, m.ID)
					case rng.IntN(10) == 0:
						stopped[k] = true
						retries = append(retries, store.Retry{ID: m.ID, Delay: time.Millisecond, Err: "injected"})
					default:
						acks = append(acks, m.ID)
					}
				}
				if _, err := f.store.Ack(f.ctx, c.Token, acks); err != nil {
					errs <- err
					return
				}
				if _, err := f.store.Retry(f.ctx, c.Token, retries); err != nil {
					errs <- err
					return
				}
				if _, err := f.store.Release(f.ctx, c.Token, releases); err != nil {
					errs <- err
					return
				}
			}
		}(uint64(w))
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var n int
		if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE status = 'delivered'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == rows || time.Now().After(deadline) || len(errs) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	type delivered struct {
		id  int64
		key string
		at  time.Time
	}
	q, err := f.pg.Pool.Query(f.ctx, `SELECT id, key, published_at FROM `+f.pg.Table.Qualified()+` WHERE status = 'delivered' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []delivered
	for q.Next() {
		var d delivered
		if err := q.Scan(&d.id, &d.key, &d.at); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != rows {
		t.Fatalf("%d of %d rows delivered", len(got), rows)
	}
	last := map[string]delivered{}
	sort.SliceStable(got, func(i, j int) bool { return got[i].id < got[j].id })
	for _, d := range got {
		if p, ok := last[d.key]; ok && d.at.Before(p.at) {
			t.Fatalf("key %s: row %d delivered at %s, before its predecessor %d at %s", d.key, d.id, d.at, p.id, p.at)
		}
		last[d.key] = d
	}
}

// The partitioned layout has the same key order index, per partition; the walk over
// keys and the runs behind heads cross partitions.
func TestOrderedClaimWorksOnThePartitionedLayout(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPGLayout(t, migrations.Partitioned)
	s, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{pg: pg, store: s, ctx: t.Context()}
	r := f.insertKeyed(t, "s", "a", "b", "a", "", "b")
	var cur store.KeyCursor
	c := f.claimOrdered(t, &cur, 100)
	if !same(ids(c), r) {
		t.Fatalf("claim took %v, want %v", ids(c), r)
	}
	if _, err := f.store.Retry(f.ctx, c.Token, []store.Retry{{ID: r[0], Delay: time.Hour, Err: "busy"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, c.Token, []int64{r[1], r[2], r[3], r[4]}); err != nil {
		t.Fatal(err)
	}
	if c := f.claimOrdered(t, &cur, 100); !same(ids(c), []int64{r[1], r[3], r[4]}) {
		t.Fatalf("claim took %v, want b's rows and the keyless one (a waits behind its head)", ids(c))
	}
}

func TestSkipHeadLeavesAHeadThatWasNeverTriedAlone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.insertKeyed(t, "s", "k", "k")
	if _, ok, err := f.store.SkipHead(f.ctx, "s", "k"); err != nil || ok {
		t.Fatalf("skip of a head never tried: ok %v, err %v; want nothing skipped", ok, err)
	}
	// Once it has failed an attempt and waits out its retry, it may be skipped.
	c := f.claimOrdered(t, &store.KeyCursor{}, 1)
	if _, err := f.store.Retry(f.ctx, c.Token, []store.Retry{{ID: r[0], Delay: time.Hour, Err: "busy"}}); err != nil {
		t.Fatal(err)
	}
	if id, ok, err := f.store.SkipHead(f.ctx, "s", "k"); err != nil || !ok || id != r[0] {
		t.Fatalf("skip of a retrying head: %d %v %v, want %d", id, ok, err, r[0])
	}
	if got := f.row(t, r[1]); got.Status != "pending" {
		t.Fatalf("the next message is %s after one skip, want pending", got.Status)
	}
}

// A key far longer than a btree entry may be is ordered by its hash: it is accepted at
// INSERT and claimed in order.
func TestALongKeyIsAcceptedAndOrdered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	long := strings.Repeat("k", 20000)
	r := f.insertKeyed(t, "s", long, long)
	c := f.claimOrdered(t, &store.KeyCursor{}, 10)
	if !same(ids(c), r) {
		t.Fatalf("claim took %v, want %v", ids(c), r)
	}
}
