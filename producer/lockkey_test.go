package producer_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/table"
)

// The stream and key the documented snippet locks; the Go side of each case picks its own.
const (
	docStream = "orders"
	docKey    = "customer-42"
)

// documentedLockSQL is the key lock as docs/ordering.md tells SQL producers to take it,
// for table n: the one ```sql block of the document that calls the lock function, with
// the default table's name replaced by n's.
func documentedLockSQL(t *testing.T, n table.Name) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/ordering.md")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		if strings.Contains(m[1], "_lock_key(") {
			found = append(found, m[1])
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/ordering.md has %d sql blocks calling the lock function, want 1", len(found))
	}
	snippet := found[0]
	for _, want := range []string{"outbox.messages_lock_key(", "'" + docStream + "'", "'" + docKey + "'"} {
		if !strings.Contains(snippet, want) {
			t.Fatalf("the documented lock %q does not contain %q, which this test substitutes or relies on", snippet, want)
		}
	}
	return strings.ReplaceAll(snippet, "outbox.messages_lock_key(", n.Derived("lock_key")+"(")
}

// session is one open transaction that can take key locks, and the backend serving it.
type session struct {
	pid  int32
	lock func(context.Context) error
	tx   *tx
}

// holder names a way to take the lock and opens a session that takes it that way.
type holder struct {
	name string
	open func(t *testing.T, e *env, stream, key string) *session
}

// goHolders are the Go client's entry points; documentedSQL is the plain-SQL producer.
var goHolders = []holder{
	{"Writer.LockKey", func(t *testing.T, e *env, stream, key string) *session {
		x := e.beginPgx(t)
		return &session{pid: pidOf(t, x), tx: x, lock: func(c context.Context) error { return e.w.LockKey(c, x.pgx, stream, key) }}
	}},
	{"Writer.LockKeySQL", func(t *testing.T, e *env, stream, key string) *session {
		x := e.beginSQL(t)
		return &session{pid: pidOf(t, x), tx: x, lock: func(c context.Context) error { return e.w.LockKeySQL(c, x.sql, stream, key) }}
	}},
}

// documentedSQL runs the documented snippet; stream and key are those of the snippet.
func documentedSQL(t *testing.T, e *env) *session {
	x := e.beginPgx(t)
	stmt := documentedLockSQL(t, e.pg.Table)
	return &session{pid: pidOf(t, x), tx: x, lock: func(c context.Context) error {
		_, err := x.pgx.Exec(c, stmt)
		return err
	}}
}

func pidOf(t *testing.T, x *tx) int32 {
	t.Helper()
	var pid int32
	var err error
	if x.pgx != nil {
		err = x.pgx.QueryRow(ctx(t), "SELECT pg_backend_pid()").Scan(&pid)
	} else {
		err = x.sql.QueryRowContext(ctx(t), "SELECT pg_backend_pid()").Scan(&pid)
	}
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// blocked reports whether waiter's lock call waits for holder's advisory lock: it starts
// the call and watches waiter's backend in pg_stat_activity until the backend waits on an
// advisory lock (true) or the call returns (false). A waiting call must then be granted
// once holder's transaction ends, which blocked checks before it returns.
func blocked(t *testing.T, e *env, holder, waiter *session) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- waiter.lock(ctx(t)) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("lock: %v", err)
			}
			return false
		default:
		}
		var waiting bool
		if err := e.pg.Pool.QueryRow(ctx(t), `SELECT coalesce(bool_or(wait_event_type = 'Lock' AND wait_event = 'advisory'), false)
			FROM pg_stat_activity WHERE pid = $1`, waiter.pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
	}
	holder.tx.rollback(t)
	if err := <-done; err != nil {
		t.Fatalf("the waiting lock failed once the holder's transaction ended: %v", err)
	}
	return true
}

// A Go producer and a SQL producer of one key must take the same lock, or the commit-order
// inversion the lock exists to prevent comes back as soon as both kinds write one key.
func TestTheGoKeyLockAndTheDocumentedSQLLockExcludeEachOther(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, g := range goHolders {
		t.Run(g.name+" held blocks the documented SQL of the same key", func(t *testing.T) {
			h := g.open(t, e, docStream, docKey)
			if err := h.lock(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if !blocked(t, e, h, documentedSQL(t, e)) {
				t.Fatal("the documented SQL lock was granted while the Go client held the same key")
			}
		})
		t.Run("the documented SQL held blocks "+g.name+" of the same key", func(t *testing.T) {
			h := documentedSQL(t, e)
			if err := h.lock(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if !blocked(t, e, h, g.open(t, e, docStream, docKey)) {
				t.Fatal("the Go client's lock was granted while the documented SQL held the same key")
			}
		})
		for _, other := range []struct{ what, stream, key string }{
			{"another key", docStream, docKey + "-other"},
			{"the same key of another stream", "payments", docKey},
		} {
			t.Run(g.name+" of "+other.what+" and the documented SQL do not wait for each other", func(t *testing.T) {
				h := g.open(t, e, other.stream, other.key)
				if err := h.lock(ctx(t)); err != nil {
					t.Fatal(err)
				}
				if blocked(t, e, h, documentedSQL(t, e)) {
					t.Fatalf("the documented SQL lock waited for %s/%s", other.stream, other.key)
				}
			})
		}
	}
}

// LockKey, the shorthand on outbox.messages, takes the same lock as the documented SQL.
func TestThePackageLevelLockKeyExcludesTheDocumentedSQL(t *testing.T) {
	t.Parallel()
	dsn, pool := defaultTableDatabase(t)
	e := setupOn(t, &testenv.PG{DSN: dsn, Table: table.Default, Pool: pool}, table.Default)
	x := e.beginPgx(t)
	if err := producer.LockKey(ctx(t), x.pgx, docStream, docKey); err != nil {
		t.Fatal(err)
	}
	if !blocked(t, e, &session{tx: x}, documentedSQL(t, e)) {
		t.Fatal("the documented SQL lock was granted while producer.LockKey held the same key")
	}
}

// A database migrated before the lock function existed gets an error that says what to
// do, from every entry point, rather than PostgreSQL's "function does not exist".
func TestLockKeyOnASchemaOlderThanTheLockFunctionSaysToMigrate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mg, err := migrations.Open(ctx(t), e.pg.DSN, e.pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	for {
		v, _, err := mg.Version()
		if err != nil {
			t.Fatal(err)
		}
		if v < producer.LockKeyVersion {
			break
		}
		if err := mg.Down(1); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range goHolders {
		t.Run(g.name, func(t *testing.T) {
			err := g.open(t, e, docStream, docKey).lock(ctx(t))
			if err == nil {
				t.Fatal("the lock was taken on a schema without the lock function")
			}
			if !strings.Contains(err.Error(), "outboxd migrate up") {
				t.Fatalf("error %q does not say to run `outboxd migrate up`", err)
			}
		})
	}
}
