package store

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestTransactionModeStatementsWalkOnlyPendingRowsBeside1MDelivered runs EXPLAIN
// ANALYZE of both claim modes' hot statements on a table holding 1,000,000 delivered
// rows and 10,000 pending ones (1 KiB payloads), logs the plans, and requires that
// neither claim nor acknowledgement scans the table. It takes about a minute, so it
// runs only with OUTBOXD_EXPLAIN_1M=1:
//
//	OUTBOXD_EXPLAIN_1M=1 go test -run TestTransactionModeStatementsWalk -v ./store/
func TestTransactionModeStatementsWalkOnlyPendingRowsBeside1MDelivered(t *testing.T) {
	if os.Getenv("OUTBOXD_EXPLAIN_1M") == "" {
		t.Skip("builds a table of 1,000,000 rows (about a minute): set OUTBOXD_EXPLAIN_1M=1 to run it")
	}
	pg := testenv.NewPG(t)
	s, err := New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	q := pg.Table.Qualified()
	for _, sql := range []string{
		`INSERT INTO ` + q + ` (stream, topic, key, payload, status, published_at)
		 SELECT 'orders', 't', 'k' || (g % 1000), convert_to(repeat('x', 1024), 'UTF8'), 'delivered', now()
		 FROM generate_series(1, 1000000) g`,
		`INSERT INTO ` + q + ` (stream, topic, key, payload)
		 SELECT 'orders', 't', 'k' || (g % 1000), convert_to(repeat('x', 1024), 'UTF8') FROM generate_series(1, 10000) g`,
		`VACUUM ANALYZE ` + q,
	} {
		if _, err := pg.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var pending []int64
	rows, err := pg.Pool.Query(ctx, `SELECT id FROM `+q+` WHERE status = 'pending' ORDER BY id LIMIT 100`)
	if err != nil {
		t.Fatal(err)
	}
	if pending, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	token := NewToken()
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"lease claim", s.sql.claim, []any{"orders", 100, token, "o", int64(30000), int64(0)}},
		{"lease ack", s.sql.ack, []any{pending, token}},
		{"transaction claim", s.sql.heldClaim, []any{"orders", 100, int64(30000), int64(0)}},
		{"transaction ack", s.sql.heldAck, []any{pending, token, "o"}},
		{"transaction retry", s.sql.heldRetry, []any{pending, token, make([]int64, len(pending)), make([]string, len(pending))}},
		{"expiry sweep", s.sql.expire, []any{"orders", int64(0), 1000, "0s"}},
	} {
		tx, err := pg.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_ = tx.Rollback(ctx)
		plan := strings.Join(lines, "\n")
		t.Logf("%s:\n%s", c.name, plan)
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s scans the table", c.name)
		}
	}
}
