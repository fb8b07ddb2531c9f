package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
	"github.com/outboxd/outboxd/table"
)

var quiet = slog.New(slog.DiscardHandler)

// scriptPath is the documented inbox, the same text as InboxSQL's.
const scriptPath = "../../docs/sql/inbox.sql"

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// inbox is one test's inbox table in the server's postgres database (testenv.AdminDSN),
// created by InboxSQL (the documented script) under a name of its own and dropped when
// the test ends.
type inbox struct {
	dsn   string
	table string // schema.table, as the driver's option takes it
	conn  *pgx.Conn
}

// newInbox creates a fresh inbox for t. A test that cannot reach PostgreSQL fails with
// what to do about it (testenv).
func newInbox(t testing.TB) *inbox {
	t.Helper()
	name := "inbox_" + suffix()
	dsn := testenv.AdminDSN()
	conn := testenv.Connect(t, dsn)
	if _, err := conn.Exec(testCtx(t), InboxSQL(table.Name{Schema: "public", Table: name})); err != nil {
		t.Fatalf("create the inbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS public."+name); err != nil {
			t.Errorf("drop inbox %s: %v", name, err)
		}
	})
	return &inbox{dsn: dsn, table: "public." + name, conn: conn}
}

// exec runs sql on the inbox's database, with {table} replaced by the inbox.
func (in *inbox) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := in.conn.Exec(testCtx(t), strings.ReplaceAll(sql, "{table}", in.table), args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// options are the driver's defaults for this inbox.
func (in *inbox) options() Options {
	o := DefaultOptions()
	o.URL = in.dsn
	o.Table = in.table
	return o
}

// row is an inbox row as a consumer reads it.
type row struct {
	seq       int64
	messageID string
	outboxID  int64
	stream    string
	routertest.Received
}

// rows reads the inbox's rows whose topic starts with prefix, by seq.
func (in *inbox) rows(t testing.TB, prefix string) []row {
	t.Helper()
	rs, err := in.conn.Query(testCtx(t), "SELECT seq, message_id, outbox_id, stream, topic, key, headers, payload FROM "+
		in.table+" WHERE starts_with(topic, $1) ORDER BY seq", prefix)
	if err != nil {
		t.Fatalf("read the inbox: %v", err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.seq, &x.messageID, &x.outboxID, &x.stream, &x.Topic, &x.Key, &x.Headers, &x.Payload)
		return x, err
	})
	if err != nil {
		t.Fatalf("read the inbox: %v", err)
	}
	return out
}

// count is how many rows the inbox holds.
func (in *inbox) count(t testing.TB) int {
	t.Helper()
	var n int
	if err := in.conn.QueryRow(testCtx(t), "SELECT count(*) FROM "+in.table).Scan(&n); err != nil {
		t.Fatalf("count the inbox: %v", err)
	}
	return n
}

// newDriver builds a driver for t and closes it when t ends.
func newDriver(t testing.TB, o Options) *Driver {
	t.Helper()
	d, err := New("test", o, quiet)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// closedPort is the DSN of a server that is not there: a port that was just free.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2"
}

// messages builds n messages on topic, each with its own message id.
func messages(topic string, n int) []router.Message {
	run := suffix()
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{
			ID:         int64(i + 1),
			Stream:     "orders",
			Topic:      topic,
			Key:        []byte("key-" + strconv.Itoa(i%3)),
			Headers:    map[string]string{"seq": strconv.Itoa(i)},
			Payload:    []byte("payload-" + strconv.Itoa(i)),
			RowDedupID: run + "-" + strconv.Itoa(i),
		}
	}
	return msgs
}

// requireNoErrors fails t unless every message was confirmed.
func requireNoErrors(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}
