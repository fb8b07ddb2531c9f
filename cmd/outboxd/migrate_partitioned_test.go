package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
)

func TestMigrateTakesTheLayoutFromJanitorPartitionsEnabled(t *testing.T) {
	t.Parallel()
	db := "OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)
	partitioned := []string{db, "OUTBOXD_JANITOR__PARTITIONS__ENABLED=true"}
	plain := []string{db}

	code, out, errOut := outboxd(t, partitioned, "migrate", "sql", "up")
	if code != 0 || !strings.Contains(out, "PARTITION BY RANGE (created_at)") {
		t.Fatalf("migrate sql up with partitions enabled: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut = outboxd(t, partitioned, "migrate", "up"); code != 0 || !strings.Contains(out, fmt.Sprintf("schema version %d of %d (clean)", migrations.Latest(), migrations.Latest())) {
		t.Fatalf("migrate up with partitions enabled: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var kind string
	conn := testenv.Connect(t, strings.TrimPrefix(db, "OUTBOXD_DATABASE_URL="))
	if err := conn.QueryRow(context.Background(), `SELECT relkind::text FROM pg_class WHERE oid = 'outbox.messages'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("relkind %q, %v", kind, err)
	}
	// The same table under a configuration without partitions is refused, not converted.
	code, _, errOut = outboxd(t, plain, "migrate", "up")
	if code != 1 || !strings.Contains(errOut, "has the partitioned layout") || !strings.Contains(errOut, "janitor.partitions.enabled") {
		t.Fatalf("migrate up without partitions on a partitioned table: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut = outboxd(t, partitioned, "migrate", "down", "--all"); code != 0 || !strings.Contains(out, "schema version 0 of") {
		t.Fatalf("migrate down --all: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
