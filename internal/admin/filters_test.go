package admin_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
)

// TestTheAPIFiltersAndRequeuesAsTheConsoleDoes: GET /api/v1/messages takes the
// console's filters (id range, key, topic, error text) and the requeue body takes them
// too, through the same operations: only the matching failed messages change.
func TestTheAPIFiltersAndRequeuesAsTheConsoleDoes(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	ids := f.insert(t, "orders", 4)
	f.fail(t, ids...)
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET last_error = 'timeout', topic = 'slow' WHERE id = ANY ($1)`,
		ids[1:3]); err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + token}
	res := f.do(t, "GET", fmt.Sprintf("/api/v1/messages?topic=slow&error=TIME&from_id=%d&to_id=%d", ids[2], ids[3]), "", auth...)
	var page ops.MessagePage
	res.decode(t, &page)
	if res.Status != http.StatusOK || len(page.Messages) != 1 || page.Messages[0].ID != ids[2] || page.Scanned == 0 {
		t.Fatalf("filtered listing: %d %s, want only message %d and the rows scanned", res.Status, res.Body, ids[2])
	}
	res = f.do(t, "POST", "/api/v1/messages/requeue", `{"stream": "orders", "all": true, "error_contains": "timeout", "topic": "slow"}`,
		append([]string{"Content-Type", "application/json"}, auth...)...)
	if res.Status != http.StatusOK {
		t.Fatalf("filtered requeue: %d %s", res.Status, res.Body)
	}
	for i, id := range ids {
		want := "failed"
		if i == 1 || i == 2 {
			want = "pending"
		}
		if got := f.state(t, id).Status; got != want {
			t.Errorf("message %d after the filtered requeue: %s, want %s", id, got, want)
		}
	}
}

// TestARareStreamAmongDeliveredRowsIsScannedWithinTheBudget: no index covers the
// stream of delivered rows, so a listing by stream alone examines at most ScanBudget
// rows, says so, and its cursor goes on from there to the match.
func TestARareStreamAmongDeliveredRowsIsScannedWithinTheBudget(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	if _, err := f.pg.Pool.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload, status, published_at)
		SELECT 'orders', 't', '\x00', 'delivered', now() FROM generate_series(1, $1)`, ops.ScanBudget+50); err != nil {
		t.Fatal(err)
	}
	rare := f.insert(t, "payments", 1)[0]
	var page ops.MessagePage
	f.do(t, "GET", "/api/v1/messages?stream=payments", "").decode(t, &page)
	if len(page.Messages) != 0 || page.Scanned != ops.ScanBudget || page.NextCursor == "" {
		t.Fatalf("first page of a rare stream: %d messages, scanned %d, cursor %q; want none, %d scanned and a cursor",
			len(page.Messages), page.Scanned, page.NextCursor, ops.ScanBudget)
	}
	var next ops.MessagePage
	f.do(t, "GET", "/api/v1/messages?stream=payments&cursor="+page.NextCursor, "").decode(t, &next)
	if len(next.Messages) != 1 || next.Messages[0].ID != rare || next.NextCursor != "" {
		t.Errorf("the page after the budget: %+v, want message %d and no cursor", next, rare)
	}
}
