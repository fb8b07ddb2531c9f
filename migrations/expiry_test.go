package migrations_test

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// Version 6 on a table that holds rows of every status, both layouts: up keeps every
// row and lets a row expire, with its reason, and the view count it; down turns the
// expired row into a failed one with the same reason and restores the version 5 view;
// up again works.
func TestExpiryMigrationUpAndDownKeepEveryRowOfBothLayouts(t *testing.T) {
	t.Parallel()
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			n := table.Default
			dsn := testenv.EmptyDatabase(t)
			conn, ctx := connect(t, dsn)
			m, err := layout.Open(ctx, dsn, n)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := m.Up(); err != nil {
				t.Fatal(err)
			}
			toFive := int(migrations.Latest()) - 5 // the versions after expiry's, and its own
			if err := m.Down(toFive); err != nil {
				t.Fatalf("down to 5: %v", err)
			}
			if layout == migrations.Partitioned {
				day := time.Now().UTC().Truncate(24 * time.Hour)
				addPartition(t, ctx, conn, n, day, day.AddDate(0, 0, 1))
			}
			if _, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload)
				SELECT 'a', 't', 'x' FROM generate_series(1, 40)`); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `UPDATE outbox.messages SET status = 'failed', last_error = 'no' WHERE id <= 10;
				UPDATE outbox.messages SET status = 'delivered', published_at = now() WHERE id BETWEEN 11 AND 20`); err != nil {
				t.Fatal(err)
			}
			if err := m.Up(); err != nil {
				t.Fatalf("up from 5 with rows: %v", err)
			}
			if _, err := conn.Exec(ctx, `UPDATE outbox.messages SET status = 'expired', last_error = 'expires_at passed' WHERE id = 40`); err != nil {
				t.Fatalf("expire a row: %v", err)
			}
			if _, err := conn.Exec(ctx, `UPDATE outbox.messages SET status = 'expired' WHERE id = 39`); err == nil {
				t.Fatal("an expired row without a reason was accepted")
			}
			var pending, delivered, failed, expired int
			if err := conn.QueryRow(ctx, `SELECT pending, delivered, failed, expired FROM outbox.messages_stats WHERE stream = 'a'`).
				Scan(&pending, &delivered, &failed, &expired); err != nil || pending != 19 || delivered != 10 || failed != 10 || expired != 1 {
				t.Fatalf("at 6: pending %d delivered %d failed %d expired %d (%v)", pending, delivered, failed, expired, err)
			}
			if err := m.Down(toFive); err != nil {
				t.Fatalf("down to 5 with an expired row: %v", err)
			}
			var status, reason string
			if err := conn.QueryRow(ctx, `SELECT status, last_error FROM outbox.messages WHERE id = 40`).Scan(&status, &reason); err != nil ||
				status != "failed" || reason != "expires_at passed" {
				t.Fatalf("after down the expired row is %s (%q), %v", status, reason, err)
			}
			var rows int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox.messages`).Scan(&rows); err != nil || rows != 40 {
				t.Fatalf("after down %d rows (%v)", rows, err)
			}
			if _, err := conn.Exec(ctx, `SELECT expired FROM outbox.messages_stats`); err == nil {
				t.Fatal("the version 5 view still has an expired column")
			}
			if err := m.Up(); err != nil {
				t.Fatalf("up again: %v", err)
			}
			if v, dirty := version(t, ctx, dsn, n); v != migrations.Latest() || dirty {
				t.Fatalf("version %d dirty %v", v, dirty)
			}
		})
	}
}
