package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// readyOn serves the admin API of a store on its own pool, opened on dsn for table n,
// and returns the pool (only this test uses it) and a function that asks /readyz.
func readyOn(t *testing.T, dsn string, n table.Name) (*pgxpool.Pool, func() (admin.Readiness, int)) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn) // connects at its first use
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := store.New(pool, n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin.New(admin.Options{Store: st, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return pool, func() (admin.Readiness, int) {
		res, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var r admin.Readiness
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("readyz body %q: %v", body, err)
		}
		return r, res.StatusCode
	}
}

// A readiness probe asks the database one question for both built-in checks: a
// Kubernetes probe every few seconds from every replica is load on the database too,
// and the first one after a start waits for it.
func TestReadinessAsksTheDatabaseOneQuestionForItsTwoChecks(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	pool, ready := readyOn(t, pg.DSN, pg.Table)
	for i := range 3 {
		before := pool.Stat().AcquireCount()
		r, status := ready()
		if status != http.StatusOK || !r.Ready || len(r.Checks) != 2 {
			t.Fatalf("probe %d: %d %+v; want ready with the database and schema checks", i, status, r)
		}
		if n := pool.Stat().AcquireCount() - before; n != 1 {
			t.Fatalf("probe %d took the pool's connection %d times; want once", i, n)
		}
	}
}

// When the database does not answer, the database check says why and the schema check
// says it was not asked, rather than repeating the connection's error as the schema's.
func TestReadinessSaysTheSchemaWasNotCheckedWhenTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	_, ready := readyOn(t, fmt.Sprintf("postgres://nobody@%s/none?connect_timeout=2", addr),
		table.Name{Schema: "outboxd", Table: "messages"})
	r, status := ready()
	if status != http.StatusServiceUnavailable || r.Ready || len(r.Checks) != 2 {
		t.Fatalf("database down: %d %+v; want 503 with two checks", status, r)
	}
	db, schema := r.Checks[0], r.Checks[1]
	if db.Name != "database" || db.OK || !strings.Contains(db.Error, "connect") {
		t.Errorf("database check %+v; want it failed, naming the connection", db)
	}
	if schema.Name != "schema" || schema.OK || schema.Error != "not checked: the database did not answer" {
		t.Errorf("schema check %+v; want it failed as not checked", schema)
	}
}
