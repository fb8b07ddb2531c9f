package admin_test

import (
	"net/http"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
)

func TestStatsCountExpiredMessagesNextToFailedOnes(t *testing.T) {
	t.Parallel()
	f := setup(t, nil) // serves orders and payments
	ids := f.insert(t, "orders", 5)
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+`
		SET status = 'expired', last_error = 'expires_at passed before delivery' WHERE id = ANY ($1)`, ids[:3]); err != nil {
		t.Fatal(err)
	}
	res := f.do(t, "GET", "/api/v1/stats", "")
	if res.Status != http.StatusOK {
		t.Fatalf("stats: %d %s", res.Status, res.Body)
	}
	var st ops.Stats
	res.decode(t, &st)
	for _, s := range st.Streams {
		if s.Stream == "orders" {
			if s.Expired != 3 || s.Pending != 2 || s.Failed != 0 {
				t.Fatalf("orders: %+v, want 3 expired, 2 pending", s)
			}
			return
		}
	}
	t.Fatalf("orders missing from stats: %+v", st.Streams)
}
