package app

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
)

// The expiry run: two replicas drain a JetStream stream with a 10s ttl while JetStream
// is down. Of the messages committed meanwhile, some carry an expires_at 1s ahead and
// some were created 9s ago (their ttl runs out after 1s); the rest have no expiry of their
// own. When JetStream comes back, every message without an expiry arrives and none of
// the others does: they are marked expired, with the reason, and counted.
func TestExpiryRunNoExpiredMessageReachesTheBrokerAndEveryOtherDoes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	shipments := w.cfg.Streams["shipments"]
	shipments.TTL = 10 * time.Second
	w.cfg.Streams = map[string]config.Stream{"shipments": shipments}
	w.streams = []string{"shipments"}
	w.startDispatcher(t, "replica-a")
	w.startDispatcher(t, "replica-b")

	w.js.Stop()
	start := time.Now()
	const live, own, byTTL = 3000, 1000, 1000
	committed := map[int64]bool{}
	doomed := map[int64]bool{}
	for _, batch := range []struct {
		n      int
		column string // besides the usual ones, and its value
		value  string
		keep   bool
	}{
		{live, "available_at", "now()", true},
		{own, "expires_at", "now() + interval '1 second'", false},
		{byTTL, "created_at", "now() - interval '9 seconds'", false},
	} {
		rows, err := w.pg.Pool.Query(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, payload, `+batch.column+`)
			SELECT 'shipments', 'sent', 'key-' || (g % 50), convert_to(repeat('p', 200), 'UTF8'), `+batch.value+`
			FROM generate_series(1, $1) g RETURNING id`, batch.n)
		must(t, err)
		for rows.Next() {
			var id int64
			must(t, rows.Scan(&id))
			if batch.keep {
				committed[id] = true
			} else {
				doomed[id] = true
			}
		}
		must(t, rows.Err())
	}
	time.Sleep(3 * time.Second) // the outage outlasts the doomed messages' expiry
	w.js.Start()

	deadline := time.Now().Add(3 * time.Minute)
	var counts map[string]int
	for {
		counts = w.statusCounts(t)["shipments"]
		if counts["delivered"]+counts["expired"] == live+own+byTTL {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within 3 minutes: %v", counts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	got := w.readJetStream(t)
	for id := range doomed {
		if got.ids[id] != 0 {
			t.Fatalf("expired message %d reached JetStream", id)
		}
	}
	requireExactly(t, "jetstream after the outage", committed, got)
	if counts["delivered"] != live || counts["expired"] != own+byTTL {
		t.Fatalf("rows %v, want %d delivered and %d expired", counts, live, own+byTTL)
	}
	var ownReason, ttlReason int
	must(t, w.pg.Pool.QueryRow(w.ctx, `SELECT count(*) FILTER (WHERE last_error LIKE 'expires_at % passed before delivery%'),
		count(*) FILTER (WHERE last_error LIKE 'expired at % before delivery (ttl 10s)%')
		FROM `+w.pg.Table.Qualified()+` WHERE status = 'expired'`).Scan(&ownReason, &ttlReason))
	if ownReason != own || ttlReason != byTTL {
		t.Fatalf("reasons: %d by expires_at, %d by ttl; want %d and %d", ownReason, ttlReason, own, byTTL)
	}
	t.Logf("expiry run: %d committed (%d with expires_at +1s, %d created 9s before a 10s ttl), JetStream down 3s: "+
		"%d arrived (0 of the %d expired), %d expired, settled %s after the first insert",
		live+own+byTTL, own, byTTL, len(got.ids), len(doomed), counts["expired"], elapsed.Round(time.Millisecond))
}
