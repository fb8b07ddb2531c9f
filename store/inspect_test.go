package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// ids lists the ids of stream's rows in id order.
func (f *fixture) ids(t testing.TB, stream string) []int64 {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT id FROM `+f.pg.Table.Qualified()+` WHERE stream = $1 ORDER BY id`, stream)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// setStatus forces rows into a status, as the dispatcher would have left them.
func (f *fixture) setStatus(t testing.TB, status string, ids ...int64) {
	t.Helper()
	var sql string
	switch status {
	case "failed":
		sql = `UPDATE ` + f.pg.Table.Qualified() + ` SET status = 'failed', attempts = 7, last_error = 'broker said no: ' || id WHERE id = ANY ($1)`
	case "delivered":
		sql = `UPDATE ` + f.pg.Table.Qualified() + ` SET status = 'delivered', published_at = now() WHERE id = ANY ($1)`
	default:
		t.Fatalf("setStatus: %s is not supported here", status)
	}
	if _, err := f.pg.Pool.Exec(f.ctx, sql, ids); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) listAll(t testing.TB, filter store.MessageFilter) []store.MessageSummary {
	t.Helper()
	var all []store.MessageSummary
	for {
		page, err := f.store.ListMessages(f.ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < filter.Limit {
			return all
		}
		filter.AfterID = page[len(page)-1].ID
	}
}

func summaryIDs(ms []store.MessageSummary) []int64 {
	ids := make([]int64, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

func TestListMessagesPagesThroughEveryMatchingRowOnceInIDOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insertPayload(t, "orders", 25, 321)
	f.insert(t, "payments", 10)
	orders := f.ids(t, "orders")
	f.setStatus(t, "failed", orders[3], orders[9], orders[20])
	f.setStatus(t, "delivered", orders[0], orders[1])

	cases := []struct {
		name   string
		filter store.MessageFilter
		want   []int64
	}{
		{"no filter lists every row of every stream", store.MessageFilter{Limit: 4}, append(slices.Clone(orders), f.ids(t, "payments")...)},
		{"a stream filter lists that stream only", store.MessageFilter{Stream: "orders", Limit: 7}, orders},
		{"a status filter lists that status only", store.MessageFilter{Status: "failed", Limit: 2}, []int64{orders[3], orders[9], orders[20]}},
		{"status and stream together narrow both ways", store.MessageFilter{Status: "failed", Stream: "payments", Limit: 2}, nil},
		{"delivered rows are listed by the primary-key walk", store.MessageFilter{Status: "delivered", Stream: "orders", Limit: 1}, orders[:2]},
		{"pending rows are listed from the backlog indexes", store.MessageFilter{Status: "pending", Stream: "orders", Limit: 5},
			slices.DeleteFunc(slices.Clone(orders), func(id int64) bool {
				return slices.Contains([]int64{orders[0], orders[1], orders[3], orders[9], orders[20]}, id)
			})},
		{"a window entirely in the future lists nothing", store.MessageFilter{Since: time.Now().Add(time.Hour), Limit: 10}, nil},
		{"a window around now lists everything", store.MessageFilter{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour), Limit: 10},
			append(slices.Clone(orders), f.ids(t, "payments")...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := summaryIDs(f.listAll(t, c.filter))
			if !slices.Equal(got, c.want) {
				t.Fatalf("listed %v, want %v", got, c.want)
			}
		})
	}

	page, err := f.store.ListMessages(f.ctx, store.MessageFilter{Status: "failed", Limit: 1})
	if err != nil || len(page) != 1 {
		t.Fatalf("list failed: %v %v", page, err)
	}
	m := page[0]
	if m.ID != orders[3] || m.Stream != "orders" || m.Topic != "topic.4" || m.Key != "k4" || m.Status != "failed" ||
		m.Attempts != 7 || !strings.HasPrefix(m.LastError, "broker said no: ") || m.PayloadBytes != 321 ||
		m.CreatedAt.IsZero() || m.AvailableAt.IsZero() || !m.PublishedAt.IsZero() || !m.LeaseUntil.IsZero() || m.Owner != "" {
		t.Fatalf("failed row summarised as %+v", m)
	}
}

func TestListMessagesShowsALeaseAndItsOwner(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 3)
	c := f.claim(t, "orders", 2)
	page, err := f.store.ListMessages(f.ctx, store.MessageFilter{Status: "leased", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(summaryIDs(page), c.IDs()) {
		t.Fatalf("leased rows listed %v, claimed %v", summaryIDs(page), c.IDs())
	}
	for _, m := range page {
		if m.Owner != "replica-test" || m.LeaseUntil.IsZero() {
			t.Fatalf("leased row without its lease: %+v", m)
		}
	}
}

func TestListMessagesRefusesFiltersOutsideTheDomain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	now := time.Now()
	cases := []struct {
		name   string
		filter store.MessageFilter
		want   string
	}{
		{"an unknown status names the valid ones", store.MessageFilter{Status: "stuck", Limit: 1}, `status "stuck" is not one of pending, leased, delivered, failed`},
		{"a zero limit is refused", store.MessageFilter{}, "limit must be between 1 and"},
		{"a limit above the maximum is refused", store.MessageFilter{Limit: store.MaxListLimit + 1}, "limit must be between 1 and"},
		{"a negative cursor is refused", store.MessageFilter{Limit: 1, AfterID: -1}, "cursor id must not be negative"},
		{"an empty window is refused", store.MessageFilter{Limit: 1, Since: now, Until: now}, "must be after since"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.store.ListMessages(f.ctx, c.filter)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestRequeueIDsResetsFailedRowsAndLeavesEveryOtherRowAlone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 5)
	ids := f.ids(t, "orders")
	f.setStatus(t, "failed", ids[0], ids[1])
	f.setStatus(t, "delivered", ids[2])
	c := f.claim(t, "orders", 1) // ids[3], leased
	before := f.row(t, ids[3])

	n, err := f.store.RequeueIDs(f.ctx, []int64{ids[0], ids[1], ids[2], ids[3], 999999})
	if err != nil || n != 2 {
		t.Fatalf("requeued %d, %v; want the 2 failed rows", n, err)
	}
	for _, id := range ids[:2] {
		r := f.row(t, id)
		if r.Status != "pending" || r.Attempts != 0 || r.LastError != nil || r.AvailableIn > 0 {
			t.Fatalf("requeued row %d: %+v", id, r)
		}
	}
	if r := f.row(t, ids[2]); r.Status != "delivered" {
		t.Fatalf("a delivered row was touched: %+v", r)
	}
	if r := f.row(t, ids[3]); r.Status != "leased" || *r.LeaseToken != [16]byte(c.Token) || *r.LeaseUntil != *before.LeaseUntil {
		t.Fatalf("a leased row was touched: %+v", r)
	}
	if n, err := f.store.RequeueIDs(f.ctx, ids[:2]); err != nil || n != 0 {
		t.Fatalf("requeueing the same rows again requeued %d, %v", n, err)
	}
	if _, err := f.store.RequeueIDs(f.ctx, make([]int64, store.MaxRequeueBatch+1)); err == nil {
		t.Fatal("an unbounded requeue was accepted")
	}
}

func TestRequeueFailedTakesChunksOfOneStreamWithinTheWindow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.insert(t, "orders", 12)
	f.insert(t, "payments", 3)
	orders, payments := f.ids(t, "orders"), f.ids(t, "payments")
	f.setStatus(t, "failed", orders...)
	f.setStatus(t, "failed", payments...)
	// Three old failures, outside a window that starts an hour ago.
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET created_at = now() - interval '1 day' WHERE id = ANY ($1)`,
		orders[:3]); err != nil {
		t.Fatal(err)
	}
	count, err := f.store.CountFailed(f.ctx, store.RequeueFilter{Stream: "orders", Since: time.Now().Add(-time.Hour)})
	if err != nil || count != 9 {
		t.Fatalf("counted %d, %v; want 9", count, err)
	}

	filter := store.RequeueFilter{Stream: "orders", Since: time.Now().Add(-time.Hour), Limit: 4}
	var chunks []int64
	for {
		r, err := f.store.RequeueFailed(f.ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if r.LastID == 0 {
			break
		}
		chunks = append(chunks, r.Requeued)
		filter.AfterID = r.LastID
	}
	if !slices.Equal(chunks, []int64{4, 4, 1}) {
		t.Fatalf("chunks requeued %v, want [4 4 1]", chunks)
	}
	for i, id := range orders {
		want := "pending"
		if i < 3 {
			want = "failed" // outside the window
		}
		if r := f.row(t, id); r.Status != want {
			t.Fatalf("orders row %d is %s, want %s", i, r.Status, want)
		}
	}
	for _, id := range payments {
		if r := f.row(t, id); r.Status != "failed" {
			t.Fatalf("another stream's row was requeued: %+v", r)
		}
	}

	// A row that fails again behind the cursor is not taken a second time.
	f.setStatus(t, "failed", orders[5])
	if r, err := f.store.RequeueFailed(f.ctx, filter); err != nil || r.Requeued != 0 || r.LastID != 0 {
		t.Fatalf("after the last chunk: %+v, %v", r, err)
	}
}

func TestRequeueFailedRefusesAnUnboundedOrUnnamedRequeue(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, c := range []struct {
		name   string
		filter store.RequeueFilter
		want   string
	}{
		{"no stream", store.RequeueFilter{Limit: 10}, "a stream is required"},
		{"no limit", store.RequeueFilter{Stream: "orders"}, "limit must be between 1 and 10000"},
		{"a limit above the maximum", store.RequeueFilter{Stream: "orders", Limit: store.MaxRequeueBatch + 1}, "limit must be between 1 and 10000"},
	} {
		if _, err := f.store.RequeueFailed(f.ctx, c.filter); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestStreamsListsEveryStreamWithABacklog(t *testing.T) {
	t.Parallel()
	f := setup(t)
	got, err := f.store.Streams(f.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty table: %v, %v", got, err)
	}
	f.insert(t, "orders", 2)
	f.insert(t, "audit", 1)
	f.insert(t, "payments", 2)
	f.insert(t, "archive", 1)
	f.claim(t, "audit", 1)
	f.setStatus(t, "failed", f.ids(t, "payments")...)
	f.setStatus(t, "delivered", f.ids(t, "archive")...)
	got, err = f.store.Streams(context.WithoutCancel(f.ctx))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"audit", "orders", "payments"}; !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v (archive has only delivered rows)", got, want)
	}
}
