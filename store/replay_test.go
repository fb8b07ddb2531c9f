package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/store"
)

// deliveredAt writes n delivered rows of stream, created at created (database time),
// with key and topic, and returns their ids.
func (f *fixture) deliveredAt(t testing.TB, stream, topic, key string, created time.Time, n int) []int64 {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+`
		(stream, topic, key, headers, payload, created_at, status, published_at)
		SELECT $1, $2, $3, jsonb_build_object('n', g::text), convert_to('m' || g, 'UTF8'), $4, 'delivered', $4
		FROM generate_series(1, $5) g ORDER BY g RETURNING id`, stream, topic, key, created, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// replayCopy is one row a replay made.
type replayCopy struct {
	ID, Of, Replay       string
	Key, Topic           *string
	MessageID            *string
	DedupID, OrigDedupID string
	Status               string
}

// copies lists the rows replays made, in id order, with the dedup id of the row each
// copies (by Outbox-Replay-Of).
func (f *fixture) copies(t testing.TB) []replayCopy {
	t.Helper()
	q := f.pg.Table.Qualified()
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT c.id::text, c.headers->>'Outbox-Replay-Of', c.headers->>'Outbox-Replay',
		c.key, c.topic, c.message_id, c.dedup_id::text, coalesce(o.dedup_id::text, ''), c.status
		FROM `+q+` c LEFT JOIN `+q+` o ON o.dedup_id::text = c.headers->>'Outbox-Replay-Of'
		WHERE c.headers ? 'Outbox-Replay' ORDER BY c.id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (replayCopy, error) {
		var c replayCopy
		err := r.Scan(&c.ID, &c.Of, &c.Replay, &c.Key, &c.Topic, &c.MessageID, &c.DedupID, &c.OrigDedupID, &c.Status)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dedupsOf returns the dedup ids of rows ids, in order.
func (f *fixture) dedupsOf(t testing.TB, ids []int64) []string {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT dedup_id::text FROM `+f.pg.Table.Qualified()+
		` WHERE id = ANY ($1) ORDER BY id`, ids)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAReplayCopiesTheDeliveredMessagesItsFilterNamesInIdOrder(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	for _, c := range []struct {
		name string
		req  func(since, until string) ops.ReplayRequest
		want func(w world) []int64
	}{
		{"a time window takes what was created in it, its end excluded",
			func(since, until string) ops.ReplayRequest {
				return ops.ReplayRequest{Stream: "orders", Since: since, Until: until}
			},
			func(w world) []int64 { return w.inWindow }},
		{"a key takes that key's messages of every time",
			func(string, string) ops.ReplayRequest { k := "k1"; return ops.ReplayRequest{Stream: "orders", Key: &k} },
			func(w world) []int64 { return append(append([]int64{}, w.before...), w.inWindow[:2]...) }},
		{"a topic takes that topic's messages",
			func(string, string) ops.ReplayRequest { return ops.ReplayRequest{Stream: "orders", Topic: "refunds"} },
			func(w world) []int64 { return w.refunds }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			w := newWorld(t, f, now)
			o := ops.New(f.store, nil)
			req := c.req(w.since.Format(time.RFC3339Nano), w.until.Format(time.RFC3339Nano))
			want := c.want(w)

			dry := req
			dry.DryRun = true
			res, err := o.Replay(f.ctx, dry, ops.ReplayOptions{})
			if err != nil || res.Total != int64(len(want)) || len(f.copies(t)) != 0 {
				t.Fatalf("dry run: %+v %v, want a total of %d and no copy", res, err, len(want))
			}
			res, err = o.Replay(f.ctx, req, ops.ReplayOptions{})
			if err != nil || res.State != "done" || res.Copied != int64(len(want)) || res.Total != int64(len(want)) {
				t.Fatalf("replay: %+v %v, want %d copied", res, err, len(want))
			}
			got := f.copies(t)
			wantDedup := f.dedupsOf(t, want)
			if len(got) != len(want) {
				t.Fatalf("%d copies, want %d", len(got), len(want))
			}
			for i, cp := range got {
				if cp.Of != wantDedup[i] || cp.OrigDedupID != wantDedup[i] {
					t.Fatalf("copy %d replays %s, want the original %s in id order", i, cp.Of, wantDedup[i])
				}
				if cp.Replay != fmt.Sprint(res.ID) || cp.MessageID != nil || cp.DedupID == cp.Of || cp.Status != "pending" {
					t.Fatalf("copy %d: %+v; want Outbox-Replay %d, no message_id, a dedup id of its own, pending", i, cp, res.ID)
				}
			}
		})
	}
}

// world is one stream's delivered rows around a time window, and others that no
// replay of it may take.
type world struct {
	since, until              time.Time
	before, inWindow, refunds []int64
}

func newWorld(t *testing.T, f *fixture, now time.Time) world {
	w := world{since: now.Add(-2 * time.Hour), until: now.Add(-time.Hour)}
	w.before = f.deliveredAt(t, "orders", "orders", "k1", w.since.Add(-time.Minute), 3)
	w.inWindow = f.deliveredAt(t, "orders", "orders", "k1", w.since, 2)
	w.inWindow = append(w.inWindow, f.deliveredAt(t, "orders", "orders", "k2", w.until.Add(-time.Second), 2)...)
	f.deliveredAt(t, "orders", "orders", "k2", w.until, 2) // the window's end: excluded
	w.refunds = f.deliveredAt(t, "orders", "refunds", "k3", now, 2)
	f.deliveredAt(t, "payments", "orders", "k1", w.since, 3) // another stream
	f.insert(t, "orders", 3)                                 // pending: not delivered, never replayed
	return w
}

func TestAnInterruptedReplayResumesWithoutCopyingARowTwiceOrSkippingOne(t *testing.T) {
	t.Parallel()
	f := setup(t)
	originals := f.deliveredAt(t, "orders", "orders", "k", time.Now(), 2*ops.ReplayChunk+500)
	o := ops.New(f.store, nil)

	// The first chunk commits; the second is cut off inside its transaction: it waits
	// on the replay row, which another session holds, until its context ends.
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	var holder pgx.Tx
	res, err := o.Replay(ctx, ops.ReplayRequest{Stream: "orders"}, ops.ReplayOptions{Progress: func(done, _ int64) {
		if done != ops.ReplayChunk {
			return
		}
		tx, err := f.pg.Pool.Begin(f.ctx)
		if err != nil {
			t.Error(err)
			return
		}
		holder = tx
		if _, err := tx.Exec(f.ctx, `SELECT 1 FROM `+f.pg.Table.Derived("replays")+` FOR UPDATE`); err != nil {
			t.Error(err)
		}
		time.AfterFunc(200*time.Millisecond, cancel)
	}})
	if err == nil || res.Copied != ops.ReplayChunk || !strings.Contains(err.Error(), "resume it with its id") {
		t.Fatalf("the interrupted replay answered %+v, %v; want an error after %d copied", res, err, ops.ReplayChunk)
	}
	if holder != nil {
		_ = holder.Rollback(f.ctx)
	}
	if got := len(f.copies(t)); got != ops.ReplayChunk {
		t.Fatalf("%d copies after the interruption, want the first chunk's %d", got, ops.ReplayChunk)
	}

	// Running the same command again goes on with the same replay.
	again, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders"}, ops.ReplayOptions{})
	if err != nil || again.ID != res.ID || !again.Resumed || again.State != "done" || again.Copied != int64(len(originals)) {
		t.Fatalf("the same replay again: %+v %v; want replay %d resumed and done with %d", again, err, res.ID, len(originals))
	}
	onceEach(t, f, originals)
}

// onceEach fails unless every original has exactly one copy, in the originals' order.
func onceEach(t *testing.T, f *fixture, originals []int64) {
	t.Helper()
	want := f.dedupsOf(t, originals)
	got := f.copies(t)
	seen := map[string]int{}
	for _, c := range got {
		seen[c.Of]++
	}
	for i, d := range want {
		if seen[d] != 1 {
			t.Fatalf("original %d was copied %d times, want once", originals[i], seen[d])
		}
		if got[i].Of != d {
			t.Fatalf("copy %d replays %s, want %s: out of id order", i, got[i].Of, d)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d copies of %d originals", len(got), len(want))
	}
}

func TestTwoRunnersOfTheSameReplayCopyEachRowOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	originals := f.deliveredAt(t, "orders", "orders", "k", time.Now(), 5*ops.ReplayChunk+7)
	o := ops.New(f.store, nil)
	var wg sync.WaitGroup
	results := make([]ops.ReplayResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders"}, ops.ReplayOptions{})
		})
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil || r.ID != results[0].ID || r.State != "done" {
			t.Fatalf("runner %d: %+v %v; every runner should go on with replay %d to its end", i, r, errs[i], results[0].ID)
		}
	}
	onceEach(t, f, originals)
}

func TestAReplayReachingBackToPurgedMessagesIsRefusedWithTheTimeToReplayFrom(t *testing.T) {
	t.Parallel()
	f := setup(t)
	old := time.Now().Add(-48 * time.Hour)
	f.deliveredAt(t, "orders", "orders", "k", old, 3)
	kept := f.deliveredAt(t, "orders", "orders", "k", time.Now().Add(-time.Hour), 2)
	f.deliveredAt(t, "payments", "payments", "k", old, 1)
	f.exec(t, `UPDATE {{table}} SET published_at = created_at`)
	n, err := f.store.Purge(f.ctx, 24*time.Hour, 1000)
	if err != nil || n != 4 {
		t.Fatalf("purge: %d %v, want 4 rows purged", n, err)
	}
	o := ops.New(f.store, nil)
	for _, since := range []string{"", old.Format(time.RFC3339Nano), "49h"} {
		_, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders", Since: since}, ops.ReplayOptions{})
		want := "messages of stream orders created at or before " + old.UTC().Format("2006-01-02T15:04:05.000000Z") +
			" were purged (retention 24:00:00); replay with since after that time"
		if !errors.Is(err, ops.ErrConflict) || err.Error() != want {
			t.Fatalf("a replay since %q: %v; want a conflict saying %q", since, err, want)
		}
	}
	if len(f.copies(t)) != 0 {
		t.Fatal("a refused replay copied rows")
	}
	res, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders", Since: "47h"}, ops.ReplayOptions{})
	if err != nil || res.Copied != int64(len(kept)) {
		t.Fatalf("a replay after the horizon: %+v %v; want %d copied", res, err, len(kept))
	}
	// The horizon is per stream: a stream that lost nothing replays from any time.
	if _, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: "refunds", DryRun: true}, ops.ReplayOptions{}); err != nil {
		t.Fatalf("a stream with nothing purged: %v", err)
	}
}

func TestADroppedPartitionRefusesAReplayOfAnyStreamReachingBackIntoIt(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	day := f.today(t).AddDate(0, 0, -3)
	f.pastPartition(t, day)
	f.deliveredAt(t, "orders", "orders", "k", day.Add(time.Hour), 2)
	f.exec(t, `UPDATE {{table}} SET published_at = created_at`)
	if dropped, err := f.store.DropExpiredPartitions(f.ctx, 24*time.Hour); err != nil || len(dropped) != 1 {
		t.Fatalf("drop: %v %v", dropped, err)
	}
	o := ops.New(f.store, nil)
	end := day.AddDate(0, 0, 1)
	for _, stream := range []string{"orders", "payments"} {
		_, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: stream, Since: end.Add(-time.Minute).Format(time.RFC3339)}, ops.ReplayOptions{})
		if !errors.Is(err, ops.ErrConflict) || !strings.Contains(err.Error(), "were purged") {
			t.Fatalf("%s: a replay into the dropped partition: %v; want it refused", stream, err)
		}
	}
	if _, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders", Since: end.Format(time.RFC3339), DryRun: true},
		ops.ReplayOptions{}); err != nil {
		t.Fatalf("a replay from the partition's end: %v", err)
	}
}

func TestAnOrderedKeysReplayIsClaimedInKeyOrderBehindWhatIsPending(t *testing.T) {
	t.Parallel()
	f := setup(t)
	originals := f.deliveredAt(t, "s", "t", "a", time.Now().Add(-time.Minute), 3)
	pending := f.insertKeyed(t, "s", "a", "a")
	res, err := ops.New(f.store, nil).Replay(f.ctx, ops.ReplayRequest{Stream: "s"}, ops.ReplayOptions{})
	if err != nil || res.Copied != 3 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	var order []string
	cur := &store.KeyCursor{}
	for len(order) < 5 {
		c := f.claimOrdered(t, cur, 2)
		if len(c.Messages) == 0 {
			t.Fatalf("the key stopped after %v", order)
		}
		for _, m := range c.Messages {
			order = append(order, m.Headers["Outbox-Replay-Of"])
		}
		if _, err := f.store.Ack(f.ctx, c.Token, c.IDs()); err != nil {
			t.Fatal(err)
		}
	}
	want := append([]string{"", ""}, f.dedupsOf(t, originals)...)
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("key a was claimed as %q; want its %d pending messages, then the replay in the originals' order %q",
			order, len(pending), want)
	}
}

func TestRowsPurgedWhileAReplayRunsAreReportedAsMissingNotCopied(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.deliveredAt(t, "orders", "orders", "k", time.Now().Add(-48*time.Hour), 3)
	kept := f.deliveredAt(t, "orders", "orders", "k", time.Now(), 2)
	f.exec(t, `UPDATE {{table}} SET published_at = created_at`)
	id, _, err := f.store.StartReplay(f.ctx, store.ReplayFilter{Stream: "orders"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.store.Purge(f.ctx, 24*time.Hour, 1000); err != nil || n != 3 {
		t.Fatalf("purge: %d %v", n, err)
	}
	res, err := ops.New(f.store, nil).Replay(f.ctx, ops.ReplayRequest{Resume: id}, ops.ReplayOptions{})
	if err != nil || res.State != "done" || res.Copied != int64(len(kept)) || res.Total != 5 {
		t.Fatalf("the replay: %+v %v; want done with the 2 kept rows of 5 copied", res, err)
	}
	if want := "; 3 counted at its start were gone"; !strings.Contains(res.Summary(), want) {
		t.Fatalf("summary %q does not say %q", res.Summary(), want)
	}
}

func TestAReplayStoppedByItsTimeBudgetStaysRunningAndGoesOnWhenResumed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	originals := f.deliveredAt(t, "orders", "orders", "k", time.Now(), 3*ops.ReplayChunk)
	o := ops.New(f.store, nil)
	// The admin API's case: no chunk starts once the budget has passed, here during the
	// first chunk's progress report.
	stop := time.Now().Add(5 * time.Second)
	res, err := o.Replay(f.ctx, ops.ReplayRequest{Stream: "orders"}, ops.ReplayOptions{Stop: stop,
		Progress: func(int64, int64) { time.Sleep(time.Until(stop)) }})
	if err != nil || res.State != "running" || res.Copied != ops.ReplayChunk || res.ID == 0 {
		t.Fatalf("a replay past its budget answered %+v %v; want running with its id after one chunk", res, err)
	}
	if !strings.Contains(res.Summary(), fmt.Sprintf("resume it with --resume %d", res.ID)) {
		t.Fatalf("summary %q does not say how to go on", res.Summary())
	}
	again, err := o.Replay(f.ctx, ops.ReplayRequest{Resume: res.ID}, ops.ReplayOptions{})
	if err != nil || again.State != "done" || again.Copied != int64(len(originals)) {
		t.Fatalf("resumed: %+v %v", again, err)
	}
	onceEach(t, f, originals)
}
