package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

// insertAged writes one row of stream with the given key (NULL for ""), created age ago
// and expiring at now() + expiresIn (no expires_at when expiresIn is nil), database clock.
func (f *fixture) insertAged(t testing.TB, stream, key string, age time.Duration, expiresIn *time.Duration) int64 {
	t.Helper()
	var k any
	if key != "" {
		k = key
	}
	var exp any
	if expiresIn != nil {
		exp = expiresIn.Milliseconds()
	}
	var id int64
	err := f.pg.Pool.QueryRow(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+`
		(stream, topic, key, payload, created_at, expires_at)
		VALUES ($1, 't', $2, 'x', now() - $3 * interval '1 millisecond',
		        now() + $4::bigint * interval '1 millisecond') RETURNING id`,
		stream, k, age.Milliseconds(), exp).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func in(d time.Duration) *time.Duration { return &d }

// withTTL rebuilds the fixture's store with a ttl for stream.
func (f *fixture) withTTL(t testing.TB, stream string, ttl time.Duration) {
	t.Helper()
	s, err := store.New(f.pg.Pool, f.pg.Table, store.WithTTL(stream, ttl))
	if err != nil {
		t.Fatal(err)
	}
	f.store = s
}

func expiredIDs(c store.Claim) map[int64]string {
	out := map[int64]string{}
	for _, e := range c.Expired {
		out[e.ID] = e.Reason
	}
	return out
}

func TestAMessagePastItsExpiresAtIsExpiredWithItsReasonAndNotClaimed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	past := f.insertAged(t, "s", "", 0, in(-time.Second))
	future := f.insertAged(t, "s", "", 0, in(time.Hour))
	plain := f.insertAged(t, "s", "", 0, nil)

	c := f.claim(t, "s", 10)
	if got := idSet(c.IDs()); len(got) != 2 || !got[future] || !got[plain] {
		t.Fatalf("claimed %v, want %d and %d", c.IDs(), future, plain)
	}
	exp := expiredIDs(c)
	if len(exp) != 1 || !strings.Contains(exp[past], "expires_at") || !strings.Contains(exp[past], "passed before delivery") {
		t.Fatalf("expired %v, want %d with an expires_at reason", exp, past)
	}
	if r := f.row(t, past); r.Status != "expired" || r.LastError == nil || *r.LastError != exp[past] {
		t.Fatalf("row %d: %+v", past, r)
	}
}

func TestAStreamTTLExpiresMessagesOlderThanItWhicheverExpiryComesFirst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.withTTL(t, "s", time.Hour)
	old := f.insertAged(t, "s", "", 2*time.Hour, in(24*time.Hour)) // ttl passed first
	young := f.insertAged(t, "s", "", time.Minute, nil)
	ownFirst := f.insertAged(t, "s", "", time.Minute, in(-time.Second)) // its own expiry first
	other := f.insertAged(t, "other", "", 2*time.Hour, nil)             // no ttl on that stream

	c := f.claim(t, "s", 10)
	if got := c.IDs(); len(got) != 1 || got[0] != young {
		t.Fatalf("claimed %v, want only %d", got, young)
	}
	exp := expiredIDs(c)
	if len(exp) != 2 || !strings.Contains(exp[old], "(ttl 1h)") || !strings.Contains(exp[ownFirst], "expires_at") {
		t.Fatalf("expired %v, want %d by ttl 1h and %d by expires_at", exp, old, ownFirst)
	}
	if got := f.claim(t, "other", 10).IDs(); len(got) != 1 || got[0] != other {
		t.Fatalf("stream without ttl claimed %v, want %d", got, other)
	}
}

func TestARowWaitingOutARetryExpiresWithItsLastErrorAndALeasedRowDoesNot(t *testing.T) {
	t.Parallel()
	f := setup(t)
	retried := f.insertAged(t, "s", "", 0, in(1500*time.Millisecond))
	leased := f.insertAged(t, "s", "", 0, in(1500*time.Millisecond))
	c := f.claim(t, "s", 10)
	if len(c.Messages) != 2 {
		t.Fatalf("claimed %v", c.IDs())
	}
	if _, err := f.store.Retry(f.ctx, c.Token, []store.Retry{{ID: retried, Delay: time.Hour, Err: "boom"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if exp := expiredIDs(f.claim(t, "s", 10)); len(exp) != 1 ||
		!strings.Contains(exp[retried], "after 1 attempt(s); last error: boom") {
		t.Fatalf("expired %v, want %d with its last error", exp, retried)
	}
	// Judged at claim time: the leased row was live then and is published.
	res, err := f.store.Ack(f.ctx, c.Token, []int64{leased})
	if err != nil || res.Changed != 1 {
		t.Fatalf("ack of the row leased before its expiry: %+v, %v", res, err)
	}
	if r := f.row(t, leased); r.Status != "delivered" {
		t.Fatalf("leased row is %s, want delivered", r.Status)
	}
}

func TestAnExpiredHeadDoesNotBlockItsKeyWhoseOtherMessagesComeInOrder(t *testing.T) {
	t.Parallel()
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			pg := testenv.NewPGLayout(t, layout)
			f := setup(t)
			f.pg = pg
			f.withTTL(t, "s", time.Hour)
			head := f.insertAged(t, "s", "k", 0, in(-time.Second))
			second := f.insertAged(t, "s", "k", 0, nil)
			middle := f.insertAged(t, "s", "k", 2*time.Hour, nil) // by ttl
			last := f.insertAged(t, "s", "k", 0, in(time.Hour))
			other := f.insertAged(t, "s", "j", 0, nil)

			c := f.claimOrdered(t, &store.KeyCursor{}, 10)
			if got := ids(c); !same(got, []int64{second, last, other}) {
				t.Fatalf("claimed %v, want %v", got, []int64{second, last, other})
			}
			if exp := expiredIDs(c); len(exp) != 2 || exp[head] == "" || exp[middle] == "" {
				t.Fatalf("expired %v, want %d and %d", exp, head, middle)
			}
		})
	}
}

func idSet(ids []int64) map[int64]bool {
	out := make(map[int64]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func TestExpiredRowsAreCountedAndPurgedOnlyPastRetentionCountedFromCreation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	old := f.insertAged(t, "s", "", 3*time.Hour, in(-time.Hour))
	young := f.insertAged(t, "s", "", time.Minute, in(-time.Second))
	pending := f.insertAged(t, "s", "", 3*time.Hour, nil)
	if exp := expiredIDs(f.claim(t, "s", 1)); len(exp) != 2 {
		t.Fatalf("expired %v", exp)
	}
	b, err := f.store.Backlogs(f.ctx, []string{"s"})
	if err != nil || len(b) != 1 || b[0].Expired != 2 {
		t.Fatalf("backlog %+v, %v; want 2 expired", b, err)
	}
	n, err := f.store.Purge(f.ctx, 2*time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want the one expired row created 3h ago", n, err)
	}
	if got := f.ids(t, "s"); !same(got, []int64{young, pending}) {
		t.Fatalf("left %v, want %v (old %d purged)", got, []int64{young, pending}, old)
	}
}

// A ttl of weeks is more milliseconds than a 32-bit integer holds; both claims and the
// sweep take it, and list the expired row by status.
func TestATTLOfWeeksWorksInEveryClaimAndExpiredRowsAreListed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.withTTL(t, "s", 40*24*time.Hour)
	old := f.insertAged(t, "s", "k", 41*24*time.Hour, nil)
	fresh := f.insertAged(t, "s", "k", 0, nil)
	c := f.claimOrdered(t, &store.KeyCursor{}, 10)
	if got := ids(c); !same(got, []int64{fresh}) || expiredIDs(c)[old] == "" {
		t.Fatalf("ordered claim %v, expired %v; want %d claimed, %d expired", got, expiredIDs(c), fresh, old)
	}
	f.insertAged(t, "s", "", 41*24*time.Hour, nil)
	if c := f.claim(t, "s", 10); len(c.Messages) != 0 || len(c.Expired) != 1 {
		t.Fatalf("claim %v, expired %v; want the old row expired", c.IDs(), expiredIDs(c))
	}
	list := f.listAll(t, store.MessageFilter{Status: "expired", Stream: "s", Limit: 100})
	if len(list) != 2 || list[0].ID != old || !strings.Contains(list[0].LastError, "(ttl 960h)") {
		t.Fatalf("listed %+v", list)
	}
}
