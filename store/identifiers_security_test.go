package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// Schema and table names are the only text outboxd splices into SQL. These tests hold
// the rule of package table: every name is checked before any SQL is built or sent, and
// every name the check accepts renders statements PostgreSQL runs as meant.

// hostileNames are names an attacker or a careless operator might configure.
var hostileNames = []string{
	`x"; DROP TABLE outbox.messages; --`,
	`messages; DELETE FROM outbox.messages`,
	`a"b`,
	`"`,
	`a'b`,
	`a\b`,
	`outbox.messages`,
	`a b`,
	"a\nb",
	"a\x00b",
	`a/*b*/`,
	`a--b`,
	`$1`,
	`a-b`,
	`1abc`,
	`Messages`,
	`pg_catalog`,
	`pg_temp`,
	`ausgänge`,
	`ａ`, // a full-width letter
	"",
	strings.Repeat("a", table.MaxNameLen+1),
}

// countingTracer counts every query a pool sends.
type countingTracer struct{ queries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestHostileTableNamesAreRefusedBeforeAnySQL(t *testing.T) {
	t.Parallel()
	dsn := testenv.SharedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Nothing listens here: a component that connected before checking the name would
	// fail with a connection error instead of naming the identifier.
	const nowhere = "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"

	long := table.Name{Schema: strings.Repeat("s", table.MaxNameLen), Table: strings.Repeat("t", table.MaxNameLen)}
	cases := []table.Name{long} // each part acceptable, the channel "<schema>.<table>" too long
	for _, hostile := range hostileNames {
		cases = append(cases, table.Name{Schema: hostile, Table: "messages"}, table.Name{Schema: "outbox", Table: hostile})
	}
	for _, n := range cases {
		part := "schema"
		if n.Schema == "outbox" || n == long {
			part = "table"
		}
		hostile := n.Schema
		if part == "table" {
			hostile = n.Table
		}
		if err := n.Validate(); err == nil || !strings.HasPrefix(err.Error(), part+": ") {
			t.Errorf("table.Name%+q.Validate() = %v; want it to name the %s", n, err, part)
		}
		c := config.Default()
		c.Schema, c.TableName = n.Schema, n.Table
		var ps *config.Problems
		if err := c.Validate(); !errors.As(err, &ps) || len(ps.Keys()) != 1 || ps.Keys()[0] != part {
			t.Errorf("config with %s %q: %v; want one problem on %s", part, hostile, err, part)
		}
		if _, err := store.New(pool, n); err == nil {
			t.Errorf("store.New accepted %+q", n)
		}
		if _, err := producer.New(n); err == nil {
			t.Errorf("producer.New accepted %+q", n)
		}
		for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
			if _, err := layout.Render(n); err == nil {
				t.Errorf("%s Render accepted %+q", layout, n)
			}
			if _, err := layout.Script(n, "up"); err == nil {
				t.Errorf("%s Script accepted %+q", layout, n)
			}
			if _, err := layout.Open(ctx, nowhere, n); err == nil || strings.Contains(err.Error(), "connect") {
				t.Errorf("%s Open(%+q) = %v; want the name refused before connecting", layout, n, err)
			}
		}
	}
	if q := tracer.queries.Load(); q != 0 || pool.Stat().TotalConns() != 0 {
		t.Fatalf("refusing the names sent %d queries over %d connections; want none", q, pool.Stat().TotalConns())
	}
}

// acceptedNames draws names the rule accepts, biased to the awkward ones: reserved
// words, the longest allowed, leading underscores, digits, one character.
func acceptedNames(r *rand.Rand, n int) []string {
	names := []string{"select", "order", "user", "table", "_", "x", "end", "pg", strings.Repeat("z", table.MaxNameLen), "_1"}
	const first, rest = "abcdefghijklmnopqrstuvwxyz_", "abcdefghijklmnopqrstuvwxyz_0123456789"
	for len(names) < n {
		b := []byte{first[r.IntN(len(first))]}
		for range r.IntN(table.MaxNameLen) {
			b = append(b, rest[r.IntN(len(rest))])
		}
		if s := string(b); table.CheckIdent(s) == nil {
			names = append(names, s)
		}
	}
	return names
}

// Property: every name CheckIdent accepts, as schema or table, renders migrations that
// apply and revert, statements that run, and a notification channel LISTEN hears.
func TestEveryAcceptedTableNameRendersSQLThatRunsAsMeant(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	names := acceptedNames(rand.New(rand.NewPCG(7, 11)), 24)
	for i, name := range names {
		// Each name is tried once as a schema and once as a table, beside a neighbour.
		n := table.Name{Schema: name, Table: names[(i+1)%len(names)]}
		t.Run(n.String(), func(t *testing.T) {
			t.Parallel()
			if err := n.Validate(); err != nil {
				// Two acceptable names too long together for the notification channel.
				if len(n.Channel()) <= table.MaxChannelLen || !strings.Contains(err.Error(), "notification channel") {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := migrations.Render(n); err == nil {
					t.Fatal("Render accepted a name whose channel PostgreSQL refuses")
				}
				return
			}
			layout := migrations.Plain
			if i%4 == 0 {
				layout = migrations.Partitioned
			}
			if err := layout.Up(ctx, dsn, n); err != nil {
				t.Fatalf("migrate up %s: %v", n, err)
			}
			st, err := store.New(pool, n)
			if err != nil {
				t.Fatal(err)
			}
			if layout == migrations.Partitioned {
				if _, err := st.CreatePartitions(ctx, 24*time.Hour, 2); err != nil {
					t.Fatalf("create partitions: %v", err)
				}
			}
			if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != migrations.Latest() {
				t.Fatalf("schema version %d dirty=%v: %v", v, dirty, err)
			}
			listen, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer listen.Close(context.Background())
			if _, err := listen.Exec(ctx, "LISTEN "+n.ListenChannel()); err != nil {
				t.Fatalf("LISTEN %s: %v", n.ListenChannel(), err)
			}

			w, err := producer.New(n)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background()) // a no-op once committed
			if _, err := w.Enqueue(ctx, tx, producer.Message{Stream: "s", Topic: "t", Headers: map[string]string{"h": "v"}, Payload: []byte("p")}); err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if err := w.EnqueueBatch(ctx, tx, []producer.Message{{Stream: "s", Topic: "t", Payload: []byte("q")}}); err != nil {
				t.Fatalf("enqueue batch: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			note, err := listen.WaitForNotification(wctx)
			wcancel()
			if err != nil || note.Payload != "s" {
				t.Fatalf("notification on %s: %+v, %v", n.Channel(), note, err)
			}

			claim, err := st.Claim(ctx, "s", 10, "replica", time.Minute, store.Position{})
			if err != nil || len(claim.Messages) != 2 {
				t.Fatalf("claim: %d rows, %v", len(claim.Messages), err)
			}
			if res, err := st.Ack(ctx, claim.Token, claim.IDs()[:1]); err != nil || res.Changed != 1 {
				t.Fatalf("ack: %+v, %v", res, err)
			}
			if res, err := st.Fail(ctx, claim.Token, []store.Failure{{ID: claim.IDs()[1], Err: "x", Attempted: true}}); err != nil || res.Changed != 1 {
				t.Fatalf("fail: %+v, %v", res, err)
			}
			if n, err := st.RequeueIDs(ctx, claim.IDs()[1:]); err != nil || n != 1 {
				t.Fatalf("requeue: %d, %v", n, err)
			}
			if _, err := st.Backlogs(ctx, []string{"s"}); err != nil {
				t.Fatalf("backlogs: %v", err)
			}
			if u, err := st.UnservedStreams(ctx, nil); err != nil || len(u) != 1 {
				t.Fatalf("unserved: %+v, %v", u, err)
			}
			if page, err := st.ListMessages(ctx, store.MessageFilter{Limit: 10, Status: "pending"}); err != nil || len(page) != 1 {
				t.Fatalf("list: %d rows, %v", len(page), err)
			}
			if streams, err := st.Streams(ctx); err != nil || len(streams) != 1 {
				t.Fatalf("streams: %v, %v", streams, err)
			}
			if _, err := st.Reclaim(ctx, 10); err != nil {
				t.Fatalf("reclaim: %v", err)
			}
			if _, err := st.Purge(ctx, 0, 10); err != nil {
				t.Fatalf("purge: %v", err)
			}
			lock, err := st.TryLock(ctx)
			if err != nil || lock == nil {
				t.Fatalf("lock: %v", err)
			}
			lock.Release(ctx)

			mg, err := layout.Open(ctx, dsn, n)
			if err != nil {
				t.Fatal(err)
			}
			defer mg.Close()
			if err := mg.Down(0); err != nil {
				t.Fatalf("migrate down %s: %v", n, err)
			}
		})
	}
}
