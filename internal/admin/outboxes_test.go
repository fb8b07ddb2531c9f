package admin_test

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// TestWritesToAStreamOfSeveralOutboxesMustNameTheOutbox serves two outbox tables that
// both have the stream orders, and a third whose database has not answered yet.
func TestWritesToAStreamOfSeveralOutboxesMustNameTheOutbox(t *testing.T) {
	t.Parallel()
	var other *testenv.PG
	f := setup(t, func(o *admin.Options) {
		other = testenv.NewPG(t)
		st, err := store.New(other.Pool, other.Table)
		if err != nil {
			t.Fatal(err)
		}
		streams := []ops.Stream{{Name: "orders", Driver: "bus"}}
		o.AdminToken = token
		o.Outboxes = []admin.Outbox{
			{Name: "shop", Store: o.Store, Streams: streams},
			{Name: "billing", Store: st, Streams: append(streams, ops.Stream{Name: "invoices", Driver: "bus"})},
			{Name: "later", Waiting: func() string { return "waiting for the database: connection refused" }, Streams: streams},
		}
	})
	ids := f.insert(t, "orders", 2)
	f.fail(t, ids...)

	for _, c := range []struct {
		name, body, want string
		status           int
	}{
		{"a requeue by stream without an outbox is refused naming the outboxes", `{"stream":"orders","all":true}`,
			`stream "orders" is configured in several outboxes (shop, billing, later): name one with outbox`, 400},
		{"a requeue by ids without an outbox is refused, since ids repeat across tables", `{"ids":[1]}`,
			"this replica serves several outboxes (shop, billing, later): name one with outbox", 400},
		{"an outbox that is not served is refused naming those that are", `{"ids":[1],"outbox":"nope"}`,
			`no outbox named "nope"; this replica serves shop, billing, later`, 400},
		{"an outbox whose database has not answered says so", `{"ids":[1],"outbox":"later"}`,
			"outbox later: waiting for the database: connection refused", 503},
	} {
		r := f.do(t, "POST", "/api/v1/messages/requeue", c.body, bearer(token)...)
		if r.Status != c.status || !strings.Contains(r.errorText(t), c.want) {
			t.Errorf("%s: got %d %s, want %d saying %q", c.name, r.Status, r.Body, c.status, c.want)
		}
	}
	if got := f.state(t, ids[0]).Status; got != "failed" {
		t.Fatalf("a refused requeue changed a row: status %s", got)
	}

	r := f.do(t, "POST", "/api/v1/messages/requeue", `{"stream":"orders","all":true,"outbox":"shop"}`, bearer(token)...)
	var res ops.RequeueResult
	if r.decode(t, &res); r.Status != 200 || res.Requeued != 2 {
		t.Errorf("requeue in outbox shop: %d %s, want 2 requeued", r.Status, r.Body)
	}
	// A stream only one outbox has needs no outbox.
	if r := f.do(t, "POST", "/api/v1/messages/skip", `{"stream":"invoices","key":"k"}`, bearer(token)...); r.Status != 409 {
		t.Errorf("skip in the one outbox with stream invoices: %d %s, want 409 (no head to skip)", r.Status, r.Body)
	}

	var all ops.AllStats
	r = f.do(t, "GET", "/api/v1/stats", "", bearer(token)...)
	if r.decode(t, &all); len(all.Outboxes) != 3 || all.Outboxes[0].Outbox != "shop" || all.Outboxes[1].Table != other.Table.String() ||
		!strings.Contains(all.Outboxes[2].Error, "connection refused") {
		t.Errorf("stats over every outbox = %s; want shop, billing (its table) and later (with why it has none)", r.Body)
	}
	var one ops.Stats
	r = f.do(t, "GET", "/api/v1/stats?outbox=billing", "", bearer(token)...)
	if r.decode(t, &one); one.Outbox != "billing" || len(one.Streams) != 2 {
		t.Errorf("stats?outbox=billing = %s", r.Body)
	}
	r = f.do(t, "GET", "/readyz", "")
	if r.Status != 503 || !strings.Contains(r.Body, `"later.database"`) || !strings.Contains(r.Body, `"shop.schema"`) {
		t.Errorf("/readyz = %d %s; want 503 naming later.database beside the others' checks", r.Status, r.Body)
	}
	if r := f.do(t, "GET", "/readyz?outbox=billing", ""); r.Status != 200 {
		t.Errorf("/readyz?outbox=billing = %d %s; want 200", r.Status, r.Body)
	}
}
