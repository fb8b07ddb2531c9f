//go:build unix

package testenv_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestAPrivatePostgresRestartsOnItsOwnPortWithItsData(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := testenv.StartPrivatePostgres(ctx)
	if errors.Is(err, testenv.ErrNoPrivatePostgres) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	dsn, err := pg.CreateDatabase(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE t (v int); INSERT INTO t VALUES (42)")

	if err := pg.Stop(ctx, testenv.ShutdownImmediate); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, dsn); err == nil {
		t.Fatal("the stopped server still answers")
	}
	if err := pg.Start(ctx); err != nil { // Start checks SHOW data_directory itself
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	err = conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v)
	conn.Close(ctx)
	if err != nil || v != 42 {
		t.Fatalf("after a crash and a start: %d, %v", v, err)
	}

	dir := pg.DataDir()
	if err := pg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s behind: %v", dir, err)
	}
	if err := pg.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}
