package admin_test

import (
	"net/http"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
)

func TestStatsListStreamsWithPendingRowsThatNoPipelineServes(t *testing.T) {
	t.Parallel()
	f := setup(t, nil) // serves orders and payments
	f.insert(t, "orders", 2)
	f.insert(t, "ordrs", 3) // a producer's typo: nobody delivers these
	delivered := f.insert(t, "archive", 1)
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET status = 'delivered', published_at = now()
		WHERE id = ANY ($1)`, delivered); err != nil {
		t.Fatal(err)
	}

	res := f.do(t, "GET", "/api/v1/stats", "")
	if res.Status != http.StatusOK {
		t.Fatalf("stats: %d %s", res.Status, res.Body)
	}
	var st ops.Stats
	res.decode(t, &st)
	got := map[string]ops.StreamStats{}
	var order []string
	for _, s := range st.Streams {
		got[s.Stream] = s
		order = append(order, s.Stream)
	}
	typo, ok := got["ordrs"]
	if !ok {
		t.Fatalf("the unserved stream ordrs is missing from stats: %v", order)
	}
	if !typo.Unserved || typo.Pending != 3 || typo.Driver != "" || typo.OldestPendingAgeSeconds <= 0 {
		t.Errorf("unserved stream: %+v, want unserved with 3 pending, no driver and an oldest pending age", typo)
	}
	for _, served := range []string{"orders", "payments"} {
		if got[served].Unserved {
			t.Errorf("the configured stream %s is marked unserved: %+v", served, got[served])
		}
	}
	if _, ok := got["archive"]; ok {
		t.Errorf("a stream whose rows are all delivered is listed: %v", order)
	}
	if len(order) != 3 || order[2] != "ordrs" {
		t.Errorf("streams %v, want the configured ones, then the unserved one", order)
	}
}
