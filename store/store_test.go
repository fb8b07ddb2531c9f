package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	pg    *testenv.PG
	store *store.Store
	ctx   context.Context
}

func setup(t *testing.T) *fixture { return setupB(t) }

func setupB(t testing.TB) *fixture {
	t.Helper()
	pg := testenv.NewPG(t)
	s, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{pg: pg, store: s, ctx: ctx}
}

// poolWith opens a pool of its own on the fixture's database, its configuration adjusted
// by tune, for a store whose sessions differ from the shared pool's; the caller closes it.
func (f *fixture) poolWith(t testing.TB, tune func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(f.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	tune(cfg)
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// insert writes n rows for stream with plain SQL, as any producer could.
func (f *fixture) insert(t testing.TB, stream string, n int) { f.insertPayload(t, stream, n, 100) }

func (f *fixture) insertPayload(t testing.TB, stream string, n, size int) {
	t.Helper()
	_, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, headers, payload)
		SELECT $1, 'topic.' || g, 'k' || (g % 10), jsonb_build_object('n', g::text), convert_to(repeat('x', $3), 'UTF8')
		FROM generate_series(1, $2) g`, stream, n, size)
	if err != nil {
		t.Fatal(err)
	}
}

type row struct {
	Status        string
	Attempts      int
	LeaseToken    *[16]byte
	LeaseUntil    *time.Time
	Owner         *string
	LastError     *string
	PublishedAt   *time.Time
	DeferredSince *time.Time
	AvailableIn   time.Duration // available_at - now(), database clock
}

func (f *fixture) row(t testing.TB, id int64) row {
	t.Helper()
	var r row
	var availableInMs float64
	err := f.pg.Pool.QueryRow(f.ctx, `SELECT status, attempts, lease_token, lease_until, owner, last_error,
		published_at, deferred_since, extract(epoch FROM available_at - now()) * 1000
		FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&r.Status, &r.Attempts, &r.LeaseToken,
		&r.LeaseUntil, &r.Owner, &r.LastError, &r.PublishedAt, &r.DeferredSince, &availableInMs)
	if err != nil {
		t.Fatalf("read row %d: %v", id, err)
	}
	r.AvailableIn = time.Duration(availableInMs * float64(time.Millisecond))
	return r
}

func (f *fixture) claim(t testing.TB, stream string, limit int) store.Claim {
	t.Helper()
	c, err := f.store.Claim(f.ctx, stream, limit, "replica-test", 30*time.Second, store.Position{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEightConcurrentClaimersClaimEveryRowExactlyOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 20000
	f.insert(t, "orders", total)

	var mu sync.Mutex
	seen := make(map[int64]int, total)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				c, err := f.store.Claim(f.ctx, "orders", 100, fmt.Sprintf("replica-%d", w), 30*time.Second, store.Position{})
				if err != nil {
					errs <- err
					return
				}
				if len(c.Messages) == 0 {
					return
				}
				mu.Lock()
				for _, m := range c.Messages {
					seen[m.ID]++
				}
				mu.Unlock()
				res, err := f.store.Ack(f.ctx, c.Token, c.IDs())
				if err != nil {
					errs <- err
					return
				}
				if res.Changed != len(c.Messages) || res.Refused != 0 {
					errs <- fmt.Errorf("ack of own claim: %+v for %d rows", res, len(c.Messages))
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("claimed %d distinct rows, inserted %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %d claimed %d times", id, n)
		}
	}
	var delivered int
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE status = 'delivered'`).Scan(&delivered); err != nil {
		t.Fatal(err)
	}
	if delivered != total {
		t.Fatalf("%d rows delivered, want %d", delivered, total)
	}
}

func TestClaimLeasesRowsOfItsStreamOnlyWithTheirContent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 3)
	f.insert(t, "payments", 2)
	if _, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+
		` (stream, topic, payload, available_at) VALUES ('orders', 'later', 'x', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}

	c := f.claim(t, "orders", 10)
	if len(c.Messages) != 3 {
		t.Fatalf("claimed %d rows of orders, want the 3 available ones", len(c.Messages))
	}
	for i, m := range c.Messages {
		if m.Stream != "orders" || m.Topic != fmt.Sprintf("topic.%d", i+1) || m.Headers["n"] != fmt.Sprint(i+1) ||
			len(m.Payload) != 100 || string(m.Key) != fmt.Sprintf("k%d", (i+1)%10) || m.Attempts != 0 {
			t.Fatalf("message %d read back as %+v", i, m)
		}
		r := f.row(t, m.ID)
		if r.Status != "leased" || r.LeaseToken == nil || *r.LeaseToken != c.Token || *r.Owner != "replica-test" {
			t.Fatalf("row %d after claim: %+v", m.ID, r)
		}
		if d := r.LeaseUntil.Sub(c.LeaseUntil); d != 0 {
			t.Fatalf("claim reports lease until %v, row holds %v", c.LeaseUntil, r.LeaseUntil)
		}
	}
	var leaseLeft float64
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT extract(epoch FROM $1::timestamptz - now())`, c.LeaseUntil).Scan(&leaseLeft); err != nil {
		t.Fatal(err)
	}
	if leaseLeft < 25 || leaseLeft > 30 {
		t.Fatalf("lease ends in %.1fs on the database clock, want about 30s", leaseLeft)
	}
	if again := f.claim(t, "orders", 10); len(again.Messages) != 0 {
		t.Fatalf("leased rows were claimed again: %d", len(again.Messages))
	}
}

func TestClaimIsInAvailabilityOrderAndHonoursTheLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 250)
	var last int64
	for i := 0; i < 3; i++ {
		c := f.claim(t, "orders", 100)
		want := []int{100, 100, 50}[i]
		if len(c.Messages) != want {
			t.Fatalf("claim %d took %d rows, want %d", i, len(c.Messages), want)
		}
		for _, m := range c.Messages {
			if m.ID <= last {
				t.Fatalf("claim %d returned id %d after %d", i, m.ID, last)
			}
			last = m.ID
		}
	}
}

func TestWriteBackWithAStaleTokenChangesNothingAndIsCountedAsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 4)
	c := f.claim(t, "orders", 4)
	stale := store.NewToken()
	ids := c.IDs()
	before := f.row(t, ids[0])

	writes := []struct {
		name  string
		write func() (store.WriteResult, error)
	}{
		{"ack", func() (store.WriteResult, error) {
			res, err := f.store.Ack(f.ctx, stale, ids)
			return res.WriteResult, err
		}},
		{"release", func() (store.WriteResult, error) { return f.store.Release(f.ctx, stale, ids) }},
		{"retry", func() (store.WriteResult, error) {
			return f.store.Retry(f.ctx, stale, []store.Retry{{ID: ids[0], Delay: time.Second, Err: "x"}})
		}},
		{"defer", func() (store.WriteResult, error) {
			res, err := f.store.Defer(f.ctx, stale, []store.Deferral{{ID: ids[0], Delay: time.Second, Err: "x"}}, 0)
			return res.WriteResult, err
		}},
		{"fail", func() (store.WriteResult, error) {
			res, err := f.store.Fail(f.ctx, stale, []store.Failure{{ID: ids[0], Err: "x", Attempted: true}})
			return res.WriteResult, err
		}},
	}
	for _, w := range writes {
		res, err := w.write()
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if res.Changed != 0 || res.Refused == 0 {
			t.Fatalf("%s with a stale token: %+v", w.name, res)
		}
	}
	if after := f.row(t, ids[0]); after.Status != "leased" || *after.LeaseToken != *before.LeaseToken || after.Attempts != 0 {
		t.Fatalf("row changed under a stale token: %+v", after)
	}
	// The token that claimed the rows still works, and a second ack is refused.
	if res, err := f.store.Ack(f.ctx, c.Token, ids); err != nil || res.Changed != 4 {
		t.Fatalf("ack with the claim's token: %+v %v", res, err)
	}
	if res, err := f.store.Ack(f.ctx, c.Token, ids); err != nil || res.Changed != 0 || res.Refused != 4 {
		t.Fatalf("second ack: %+v %v", res, err)
	}
}

func TestAckMarksRowsDeliveredOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 2)
	c := f.claim(t, "orders", 2)
	res, err := f.store.Ack(f.ctx, c.Token, c.IDs()[:1])
	if err != nil || len(res.Lags) != 1 {
		t.Fatalf("ack: %+v %v", res, err)
	}
	var lag float64
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT extract(epoch FROM published_at - created_at) FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, c.IDs()[0]).Scan(&lag); err != nil {
		t.Fatal(err)
	}
	if got := res.Lags[0].Seconds(); got < lag-0.001 || got > lag+0.001 {
		t.Fatalf("ack reported a delivery lag of %.6fs; the row says published_at - created_at = %.6fs", got, lag)
	}
	acked, other := f.row(t, c.IDs()[0]), f.row(t, c.IDs()[1])
	if acked.Status != "delivered" || acked.PublishedAt == nil || acked.LeaseToken != nil || acked.LeaseUntil != nil {
		t.Fatalf("acked row: %+v", acked)
	}
	if other.Status != "leased" {
		t.Fatalf("a row not in the ack changed: %+v", other)
	}
}

func TestAReleasedRowIsClaimableAgainAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 3)
	c := f.claim(t, "orders", 3)
	res, err := f.store.Release(f.ctx, c.Token, c.IDs())
	if err != nil || res.Changed != 3 {
		t.Fatalf("release: %+v %v", res, err)
	}
	r := f.row(t, c.IDs()[0])
	if r.Status != "pending" || r.Attempts != 0 || r.LeaseToken != nil || r.LastError != nil {
		t.Fatalf("released row: %+v", r)
	}
	again := f.claim(t, "orders", 3)
	if len(again.Messages) != 3 || again.Token == c.Token {
		t.Fatalf("reclaim after release took %d rows", len(again.Messages))
	}
}

func TestRetrySpendsAnAttemptAndWaitsOutTheBackoff(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 2)
	c := f.claim(t, "orders", 2)
	ids := c.IDs()
	res, err := f.store.Retry(f.ctx, c.Token, []store.Retry{
		{ID: ids[0], Delay: 10 * time.Minute, Err: "broker said: not enough replicas"},
		{ID: ids[1], Delay: 0, Err: "try again"},
	})
	if err != nil || res.Changed != 2 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	r := f.row(t, ids[0])
	if r.Status != "pending" || r.Attempts != 1 || r.LeaseToken != nil || *r.LastError != "broker said: not enough replicas" {
		t.Fatalf("retried row: %+v", r)
	}
	if r.AvailableIn < 9*time.Minute || r.AvailableIn > 10*time.Minute {
		t.Fatalf("retried row available in %v, want about 10m", r.AvailableIn)
	}
	next := f.claim(t, "orders", 2)
	if len(next.Messages) != 1 || next.Messages[0].ID != ids[1] || next.Messages[0].Attempts != 1 {
		t.Fatalf("claim after retry: %+v (only the row without backoff is due)", next.Messages)
	}
}

func TestDeferSpendsNoAttemptAndKeepsTheFirstDeferralStart(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 1)
	c := f.claim(t, "orders", 1)
	id := c.IDs()[0]
	if res, err := f.store.Defer(f.ctx, c.Token, []store.Deferral{{ID: id, Err: "dial tcp: connection refused"}}, time.Hour); err != nil || res.Changed != 1 || len(res.Expired) != 0 {
		t.Fatalf("defer: %+v %v", res, err)
	}
	first := f.row(t, id)
	if first.Status != "pending" || first.Attempts != 0 || first.DeferredSince == nil || *first.LastError != "dial tcp: connection refused" {
		t.Fatalf("deferred row: %+v", first)
	}
	c2 := f.claim(t, "orders", 1)
	if len(c2.Messages) != 1 || c2.Messages[0].DeferredSince.IsZero() {
		t.Fatalf("claim of a deferred row does not report its deferral: %+v", c2.Messages)
	}
	if _, err := f.store.Defer(f.ctx, c2.Token, []store.Deferral{{ID: id, Delay: time.Hour, Err: "still down"}}, 0); err != nil {
		t.Fatal(err)
	}
	second := f.row(t, id)
	if !second.DeferredSince.Equal(*first.DeferredSince) || second.Attempts != 0 {
		t.Fatalf("second deferral moved the start from %v to %v or spent an attempt (%d)", first.DeferredSince, second.DeferredSince, second.Attempts)
	}
	c3 := f.claim(t, "orders", 1)
	if len(c3.Messages) != 0 {
		t.Fatal("a row deferred for an hour was claimable at once")
	}
}

func TestDeferFailsARowDeferredForLongerThanTheMaximum(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 2)
	// One row has been deferred since two hours ago, the other since a minute ago.
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET deferred_since = now() - CASE WHEN id = 1 THEN interval '2 hours' ELSE interval '1 minute' END`); err != nil {
		t.Fatal(err)
	}
	c := f.claim(t, "orders", 2)
	res, err := f.store.Defer(f.ctx, c.Token, []store.Deferral{
		{ID: 1, Delay: time.Second, Err: "connection refused"},
		{ID: 2, Delay: time.Second, Err: "connection refused"},
	}, time.Hour)
	if err != nil || res.Changed != 2 || len(res.Expired) != 1 || res.Expired[0].ID != 1 || res.Expired[0].Attempts != 0 ||
		res.Expired[0].LastError != "deferred for longer than max_defer (01:00:00): connection refused" {
		t.Fatalf("defer with max 1h: %+v %v", res, err)
	}
	old, young := f.row(t, 1), f.row(t, 2)
	if old.Status != "failed" || old.Attempts != 0 || old.DeferredSince != nil || !strings.Contains(*old.LastError, "max_defer (01:00:00): connection refused") {
		t.Fatalf("row deferred for 2h: %+v (%s)", old, *old.LastError)
	}
	if young.Status != "pending" || young.DeferredSince == nil {
		t.Fatalf("row deferred for 1m: %+v", young)
	}
}

func TestFailRecordsTheErrorTextAndEndsDelivery(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 3)
	c := f.claim(t, "orders", 3)
	ids := c.IDs()
	long := strings.Repeat("é", store.MaxErrorLen) // cut on a rune boundary
	res, err := f.store.Fail(f.ctx, c.Token, []store.Failure{
		{ID: ids[0], Err: "message too large: 2000000 bytes > 1048576", Attempted: true},
		{ID: ids[1], Err: "deferred longer than max_defer 1h", Attempted: false},
		{ID: ids[2], Err: "bad\x00bytes \xff and " + long, Attempted: true},
	})
	if err != nil || res.Changed != 3 || len(res.Rows) != 3 {
		t.Fatalf("fail: %+v %v", res, err)
	}
	for _, r := range res.Rows {
		if stored := f.row(t, r.ID); *stored.LastError != r.LastError || stored.Attempts != r.Attempts {
			t.Fatalf("Fail reported row %d as %+v, the table holds %q with %d attempts", r.ID, r, *stored.LastError, stored.Attempts)
		}
	}
	r0, r1, r2 := f.row(t, ids[0]), f.row(t, ids[1]), f.row(t, ids[2])
	if r0.Status != "failed" || *r0.LastError != "message too large: 2000000 bytes > 1048576" || r0.Attempts != 1 || r0.LeaseToken != nil {
		t.Fatalf("failed row: %+v", r0)
	}
	if r1.Attempts != 0 {
		t.Fatalf("a failure without an attempt spent one: %+v", r1)
	}
	if !strings.HasPrefix(*r2.LastError, "badbytes \uFFFD and é") || len(*r2.LastError) > store.MaxErrorLen {
		t.Fatalf("unstorable error text stored as %q (%d bytes)", (*r2.LastError)[:20], len(*r2.LastError))
	}
	if next := f.claim(t, "orders", 3); len(next.Messages) != 0 {
		t.Fatal("failed rows were claimed")
	}
}

func TestTheTableRefusesALeasedRowWithoutALease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 1)
	_, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET status = 'leased'`)
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "23514" || !strings.Contains(err.Error(), "lease_iff_leased") {
		t.Fatalf("leased without a token: %v", err)
	}
	_, err = f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET attempts = -1`)
	if err == nil || !strings.Contains(err.Error(), "attempts_not_negative") {
		t.Fatalf("negative attempts: %v", err)
	}
	_, err = f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET status = 'sent'`)
	if err == nil || !strings.Contains(err.Error(), "status_domain") {
		t.Fatalf("unknown status: %v", err)
	}
}

func TestClaimRefusesNonsenseArguments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.store.Claim(f.ctx, "orders", 0, "r", time.Second, store.Position{}); err == nil {
		t.Fatal("limit 0 accepted")
	}
	if _, err := f.store.Claim(f.ctx, "orders", 10, "r", 0, store.Position{}); err == nil {
		t.Fatal("zero lease TTL accepted")
	}
	if _, err := store.New(f.pg.Pool, f.pg.Table); err != nil {
		t.Fatal(err)
	}
	bad := f.pg.Table
	bad.Table = "x; drop table y"
	if _, err := store.New(f.pg.Pool, bad); err == nil {
		t.Fatal("store accepted an injected table name")
	}
}

func TestSchemaVersionReadsWhatMigrationsRecorded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	v, dirty, err := f.store.SchemaVersion(f.ctx)
	if err != nil || v != migrations.Latest() || dirty {
		t.Fatalf("migrated table: version %d dirty %v err %v; want %d", v, dirty, err, migrations.Latest())
	}
	other, err := store.New(f.pg.Pool, table.Name{Schema: f.pg.Table.Schema, Table: "never_migrated"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := other.SchemaVersion(f.ctx); err != nil || v != 0 {
		t.Fatalf("unmigrated table: version %d err %v; want 0", v, err)
	}
	nowhere, err := store.New(f.pg.Pool, table.Name{Schema: f.pg.Table.Schema + "_never_created", Table: "messages"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := nowhere.SchemaVersion(f.ctx); err != nil || v != 0 {
		t.Fatalf("a table in a schema that does not exist: version %d err %v; want 0", v, err)
	}
}

func TestAckByDeleteRemovesOnlyRowsStillLeasedUnderTheToken(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s, err := store.New(f.pg.Pool, f.pg.Table, store.WithAckByDelete())
	if err != nil {
		t.Fatal(err)
	}
	f.insert(t, "orders", 3)
	c, err := s.Claim(f.ctx, "orders", 3, "r", time.Minute, store.Position{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Ack(f.ctx, store.NewToken(), c.IDs()); err != nil || res.Changed != 0 || res.Refused != 3 {
		t.Fatalf("ack by delete with a stale token: %+v %v", res, err)
	}
	if res, err := s.Ack(f.ctx, c.Token, c.IDs()[:2]); err != nil || res.Changed != 2 {
		t.Fatalf("ack by delete: %+v %v", res, err)
	}
	var left int
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d rows left, want the one not acknowledged (%v)", left, err)
	}
}
