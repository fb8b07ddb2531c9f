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
