// Package testenv gives every test in outboxd real services: PostgreSQL (its own schema
// or database per test, so tests run in parallel), an embedded NATS server with JetStream
// and an embedded Kafka-protocol broker.
//
// Invariant: a test that cannot reach a service it needs fails with instructions; it
// never skips.
//
// Package testenv is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// EnvDatabaseURL names the variable holding the test server's admin DSN. Tests create
// and drop databases through it, so never point it at a server holding data you keep.
const EnvDatabaseURL = "OUTBOXD_TEST_DATABASE_URL"

const defaultAdminDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminDSN is the DSN tests use to create their databases.
func AdminDSN() string {
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		return dsn
	}
	return defaultAdminDSN
}

// unreachable fails t with what to do about it.
func unreachable(t testing.TB, err error) {
	t.Helper()
	t.Fatalf("testenv: PostgreSQL at %s is not usable: %v\n"+
		"Run the tests with `make test` (it finds or starts a server), or start PostgreSQL and set %s "+
		"to an admin DSN such as %s.", redactDSN(AdminDSN()), err, EnvDatabaseURL, defaultAdminDSN)
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	return u.String()
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withDatabase returns dsn with its database name replaced.
func withDatabase(dsn, db string) (string, error) {
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", err
	}
	if !strings.Contains(dsn, "://") {
		return dsn + " dbname=" + db, nil // key=value form: a later key wins
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Path = "/" + db
	return u.String(), nil
}

// adminExec runs one statement on the admin connection.
func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, AdminDSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// EmptyDatabase creates a database that exists only for t and returns its DSN.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "outboxd_test_" + randomSuffix()
	if err := adminExec(ctx, "CREATE DATABASE "+name); err != nil {
		unreachable(t, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(AdminDSN(), name)
	if err != nil {
		t.Fatalf("testenv: %s: %v", EnvDatabaseURL, err)
	}
	return dsn
}

// shared is one database per test process; tests isolate themselves in schemas inside it.
var shared struct {
	once sync.Once
	dsn  string
	err  error
}

// SharedDatabase returns the DSN of a database created for this test process. Packages
// that use it should call Main from TestMain so the database is dropped at exit.
func SharedDatabase(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		name := "outboxd_test_" + randomSuffix()
		if shared.err = adminExec(ctx, "CREATE DATABASE "+name); shared.err != nil {
			return
		}
		sharedName = name
		shared.dsn, shared.err = withDatabase(AdminDSN(), name)
	})
	if shared.err != nil {
		unreachable(t, shared.err)
	}
	return shared.dsn
}

var sharedName string

// Main runs the tests and then drops the process's shared database. Use it as
// `func TestMain(m *testing.M) { testenv.Main(m) }`.
func Main(m interface{ Run() int }) {
	code := m.Run()
	if sharedName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := adminExec(ctx, "DROP DATABASE IF EXISTS "+sharedName+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: drop database %s: %v\n", sharedName, err)
		}
		cancel()
	}
	os.Exit(code)
}

// PG is a migrated outbox table of one test's own, in its own schema.
type PG struct {
	DSN   string
	Table table.Name
	Pool  *pgxpool.Pool
}

// NewPG migrates a fresh outbox table in a schema of t's own and opens a pool on it.
// The schema is dropped when t ends.
func NewPG(t testing.TB) *PG {
	t.Helper()
	return NewPGLayout(t, migrations.Plain)
}

// NewPGLayout is NewPG with the given migration layout (plain or partitioned).
func NewPGLayout(t testing.TB, layout migrations.Layout) *PG {
	t.Helper()
	dsn := SharedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := table.Name{Schema: "t_" + randomSuffix(), Table: "messages"}
	if err := layout.Up(ctx, dsn, n); err != nil {
		t.Fatalf("testenv: migrate %s: %v", n, err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		unreachable(t, err)
	}
	t.Cleanup(func() {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+table.Quote(n.Schema)+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", n.Schema, err)
		}
	})
	return &PG{DSN: dsn, Table: n, Pool: pool}
}

// Connect opens a connection to dsn for t, closed when t ends.
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		unreachable(t, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
