package admin_test

import (
	"net/http"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
)

// TestRequeueOfAWholeFilterGoesOnChunkByChunk: over HTTP as on the command line, "all"
// requeues every matching failed message, more than one chunk of them, and a limit
// bounds it exactly.
func TestRequeueOfAWholeFilterGoesOnChunkByChunk(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	n := ops.RequeueChunk*2 + 17
	ids := f.insert(t, "orders", n)
	f.fail(t, ids...)

	var got ops.RequeueResult
	res := f.do(t, "POST", "/api/v1/messages/requeue", `{"stream": "orders", "limit": 1001}`, bearer(token)...)
	res.decode(t, &got)
	if res.Status != http.StatusOK || got.Requeued != 1001 {
		t.Fatalf("requeue with limit 1001: %d %s; want 1001 requeued", res.Status, res.Body)
	}
	if s := f.state(t, ids[1000]); s.Status != "pending" {
		t.Fatalf("the 1001st oldest row after a limit of 1001: %+v, want pending", s)
	}
	if s := f.state(t, ids[1001]); s.Status != "failed" {
		t.Fatalf("the 1002nd oldest row after a limit of 1001: %+v, want still failed", s)
	}

	res = f.do(t, "POST", "/api/v1/messages/requeue", `{"stream": "orders", "all": true}`, bearer(token)...)
	res.decode(t, &got)
	if want := int64(n - 1001); res.Status != http.StatusOK || got.Requeued != want {
		t.Fatalf("requeue of all: %d %s; want %d requeued", res.Status, res.Body, want)
	}
	for _, id := range []int64{ids[1001], ids[len(ids)-1]} {
		if s := f.state(t, id); s.Status != "pending" {
			t.Fatalf("row %d after a requeue of all: %+v, want pending", id, s)
		}
	}
}
