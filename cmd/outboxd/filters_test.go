package main

import (
	"encoding/json"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
)

// TestMessagesAndRequeueTakeTheConsolesFilters: --key, --error and the id range narrow
// outboxd messages and outboxd requeue as they narrow the console's listing and bulk
// requeue, through the same operations.
func TestMessagesAndRequeueTakeTheConsolesFilters(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	w.insert(t, "orders", 4, true)
	q := w.pg.Table.Qualified()
	if _, err := w.pg.Pool.Exec(w.ctx, `UPDATE `+q+` SET key = 'acct-7', last_error = 'Timeout at the broker'
		WHERE id IN (SELECT id FROM `+q+` ORDER BY id LIMIT 2)`); err != nil {
		t.Fatal(err)
	}
	out, _ := w.mustRun(t, messagesCmd, "--key", "acct-7", "--error", "timeout", "--from-id", "2", "--json")
	var p ops.MessagePage
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(p.Messages) != 1 || p.Messages[0].ID != 2 {
		t.Fatalf("messages --key acct-7 --error timeout --from-id 2: %s", out)
	}
	w.mustRun(t, requeueCmd, "--stream", "orders", "--all", "--error", "TIMEOUT", "--to-id", "1")
	if n := w.count(t, "status = 'pending'"); n != 1 {
		t.Errorf("requeue --error TIMEOUT --to-id 1 requeued %d, want 1", n)
	}
	w.mustRun(t, requeueCmd, "--stream", "orders", "--all", "--key", "acct-7")
	if n := w.count(t, "status = 'failed'"); n != 2 {
		t.Errorf("after requeue --key acct-7, %d failed, want the 2 of other keys", n)
	}
}
