package store_test

import (
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// Six ordered claimers with injected refusals drain a stream whose messages expire
// while they work: a third on their own expires_at, spread over two seconds, the rest
// by the stream's ttl if they wait too long. Every row ends delivered or expired; along
// each key the delivered rows were delivered in id order, whatever expired between
// them; no row a claim took was expired before it was acknowledged.
func TestConcurrentOrderedClaimersKeepKeyOrderWhileHeadsExpire(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.withTTL(t, "s", 3*time.Second)
	const rows, nkeys = 3000, 40
	if _, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload, expires_at)
		SELECT 's', 't', 'k' || (g * 7919 % $2), 'x',
		       CASE WHEN g % 3 = 0 THEN now() + (g % 40) * interval '50 milliseconds' END
		FROM generate_series(1, $1) g`, rows, nkeys); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	stop := make(chan struct{})
	var mu sync.Mutex
	acked := map[int64]bool{}
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 3))
			var cur store.KeyCursor
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := f.store.ClaimOrdered(f.ctx, "s", 1+rng.IntN(40), "w", time.Minute, &cur)
				if err != nil {
					errs <- err
					return
				}
				if len(c.Messages) == 0 {
					time.Sleep(2 * time.Millisecond)
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
					case rng.IntN(8) == 0:
						stopped[k] = true
						retries = append(retries, store.Retry{ID: m.ID, Delay: 20 * time.Millisecond, Err: "injected"})
					default:
						acks = append(acks, m.ID)
					}
				}
				res, err := f.store.Ack(f.ctx, c.Token, acks)
				if err == nil && res.Changed != len(acks) {
					t.Errorf("ack of %d claimed rows changed %d", len(acks), res.Changed)
				}
				mu.Lock()
				for _, id := range acks {
					acked[id] = true
				}
				mu.Unlock()
				if err == nil {
					_, err = f.store.Retry(f.ctx, c.Token, retries)
				}
				if err == nil {
					_, err = f.store.Release(f.ctx, c.Token, releases)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(uint64(w))
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var n int
		if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+
			` WHERE status IN ('delivered', 'expired')`).Scan(&n); err != nil {
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
	type row struct {
		id     int64
		key    string
		status string
		at     time.Time
	}
	q, err := f.pg.Pool.Query(f.ctx, `SELECT id, key, status, coalesce(published_at, 'epoch') FROM `+f.pg.Table.Qualified()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for q.Next() {
		var r row
		if err := q.Scan(&r.id, &r.key, &r.status, &r.at); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	last := map[string]row{}
	sort.SliceStable(got, func(i, j int) bool { return got[i].id < got[j].id })
	for _, r := range got {
		counts[r.status]++
		if r.status == "expired" && acked[r.id] {
			t.Errorf("row %d was acknowledged and is expired", r.id)
		}
		if r.status != "delivered" {
			continue
		}
		if p, ok := last[r.key]; ok && r.at.Before(p.at) {
			t.Fatalf("key %s: row %d delivered at %s, before its predecessor %d at %s", r.key, r.id, r.at, p.id, p.at)
		}
		last[r.key] = r
	}
	if counts["delivered"]+counts["expired"] != rows || counts["delivered"] == 0 || counts["expired"] == 0 {
		t.Fatalf("rows by status %v, want every one of %d delivered or expired, some of each", counts, rows)
	}
	t.Logf("rows by status %v", counts)
}
