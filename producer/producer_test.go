package producer_test

import (
	"bytes"
	"database/sql"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/table"
)

var (
	later   = time.Date(2031, 1, 2, 3, 4, 5, 678901000, time.UTC) // microseconds: PostgreSQL's precision
	earlier = time.Date(2020, 6, 7, 8, 9, 10, 123456000, time.FixedZone("CEST", 2*3600))
)

// immediate is a set of messages in which no message sets AvailableAt, covering set and
// unset optional fields: a key and none, headers and none (nil and empty), payloads of
// text, bytes and none, a message id and none.
func immediate() []producer.Message {
	return []producer.Message{
		{Stream: "orders", Topic: "order.created", Key: "customer-7",
			Headers: map[string]string{"content-type": "application/json", "trace-id": "ä\"\\<>&"},
			Payload: []byte(`{"order":1}`), MessageID: "order-1-created"},
		{Stream: "orders", Topic: "order.paid", Payload: []byte{}},
		{Stream: "billing", Topic: "invoice.sent", Headers: map[string]string{}, Payload: []byte{0, 1, 2, 0xff}},
	}
}

// delayed is immediate with some messages due later and one due in the past.
func delayed() []producer.Message {
	msgs := immediate()
	msgs[0].AvailableAt = later
	msgs[2].AvailableAt = earlier
	return msgs
}

// expiring is delayed with one message that expires and one that expires in the past
// (kept as written: the dispatcher judges expiry, not the producer).
func expiring() []producer.Message {
	msgs := delayed()
	msgs[0].ExpiresAt = later.Add(time.Hour)
	msgs[1].ExpiresAt = earlier
	return msgs
}

// checkRows fails t unless got holds exactly msgs, in order, as the client should store them.
func checkRows(t *testing.T, got []row, msgs []producer.Message) {
	t.Helper()
	if len(got) != len(msgs) {
		t.Fatalf("table holds %d rows, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		r := got[i]
		if r.Stream != m.Stream || r.Topic != m.Topic || r.Status != "pending" {
			t.Errorf("row %d: stream, topic, status = %q, %q, %q; want %q, %q, pending", i, r.Stream, r.Topic, r.Status, m.Stream, m.Topic)
		}
		checkNullable(t, i, "key", r.Key, m.Key)
		checkNullable(t, i, "message_id", r.MessageID, m.MessageID)
		want := m.Headers
		if want == nil {
			want = map[string]string{}
		}
		if !maps.Equal(r.Headers, want) || r.Headers == nil {
			t.Errorf("row %d: headers = %v, want %v", i, r.Headers, want)
		}
		if !bytes.Equal(r.Payload, m.Payload) || r.Payload == nil {
			t.Errorf("row %d: payload = %v, want %v", i, r.Payload, m.Payload)
		}
		switch {
		case !m.AvailableAt.IsZero() && !r.AvailableAt.Equal(m.AvailableAt):
			t.Errorf("row %d: available_at = %v, want %v", i, r.AvailableAt, m.AvailableAt)
		case m.AvailableAt.IsZero() && !r.AvailableAt.Equal(r.CreatedAt):
			// Both default to the inserting statement's timestamp: the database clock.
			t.Errorf("row %d: available_at = %v, want created_at %v", i, r.AvailableAt, r.CreatedAt)
		}
		switch {
		case m.ExpiresAt.IsZero() && r.ExpiresAt != nil:
			t.Errorf("row %d: expires_at = %v, want NULL", i, *r.ExpiresAt)
		case !m.ExpiresAt.IsZero() && (r.ExpiresAt == nil || !r.ExpiresAt.Equal(m.ExpiresAt)):
			t.Errorf("row %d: expires_at = %v, want %v", i, r.ExpiresAt, m.ExpiresAt)
		}
		if i > 0 && r.ID <= got[i-1].ID {
			t.Errorf("row %d: id %d does not follow id %d of the message before it", i, r.ID, got[i-1].ID)
		}
	}
}

func checkNullable(t *testing.T, i int, column string, got *string, want string) {
	t.Helper()
	switch {
	case want == "" && got != nil:
		t.Errorf("row %d: %s = %q, want NULL", i, column, *got)
	case want != "" && (got == nil || *got != want):
		t.Errorf("row %d: %s = %v, want %q", i, column, got, want)
	}
}

// sets are the message sets each entry point must round-trip. The COPY path serves only
// batches without AvailableAt (EnqueueBatch never sends it any other), so it gets only those.
func sets(ep entryPoint) map[string]func() []producer.Message {
	s := map[string]func() []producer.Message{"messages due at once": immediate}
	if ep.name != "EnqueueBatch by COPY" {
		s["messages some of which are delayed"] = delayed
		s["messages some of which expire"] = expiring
	}
	return s
}

func TestACommittedTransactionLeavesExactlyItsRowsWithEveryField(t *testing.T) {
	t.Parallel()
	for _, ep := range allEntryPoints {
		for set, msgs := range sets(ep) {
			t.Run(ep.name+" writes "+set, func(t *testing.T) {
				t.Parallel()
				e := setup(t)
				msgs := msgs()
				x := ep.begin(e, t)
				ids, err := ep.write(ctx(t), e.w, x, msgs)
				if err != nil {
					t.Fatal(err)
				}
				x.commit(t)
				got := e.rows(t, e.pg.Table)
				checkRows(t, got, msgs)
				for i, id := range ids {
					if id != got[i].ID {
						t.Errorf("message %d: returned id %d, stored as %d", i, id, got[i].ID)
					}
				}
			})
		}
	}
}

func TestARolledBackTransactionLeavesNoRow(t *testing.T) {
	t.Parallel()
	for _, ep := range allEntryPoints {
		for set, msgs := range sets(ep) {
			t.Run(ep.name+" of "+set+" leaves nothing", func(t *testing.T) {
				t.Parallel()
				e := setup(t)
				x := ep.begin(e, t)
				if _, err := ep.write(ctx(t), e.w, x, msgs()); err != nil {
					t.Fatal(err)
				}
				x.rollback(t)
				if n := e.count(t, e.pg.Table); n != 0 {
					t.Fatalf("table holds %d rows after rollback", n)
				}
			})
		}
	}
}

func TestABatchLargerThanOneStatementIsWrittenWholeAndInOrder(t *testing.T) {
	t.Parallel()
	const n = 12_000
	if n <= producer.MaxSQLRows {
		t.Fatalf("%d messages fit in one database/sql statement of %d", n, producer.MaxSQLRows)
	}
	for _, ep := range allEntryPoints {
		if ep.name == "Enqueue" || ep.name == "EnqueueSQL" {
			continue
		}
		t.Run(ep.name+" writes "+strconv.Itoa(n)+" messages", func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			msgs := make([]producer.Message, n)
			for i := range msgs {
				msgs[i] = producer.Message{Stream: "s" + strconv.Itoa(i%3), Topic: "t", Payload: []byte(strconv.Itoa(i))}
				if i%2 == 1 && ep.name != "EnqueueBatch by COPY" {
					msgs[i].AvailableAt = later
				}
			}
			x := ep.begin(e, t)
			if _, err := ep.write(ctx(t), e.w, x, msgs); err != nil {
				t.Fatal(err)
			}
			x.commit(t)
			checkRows(t, e.rows(t, e.pg.Table), msgs)
		})
	}
}

func TestAWriterForAnotherTableWritesThere(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	events := table.Name{Schema: pg.Table.Schema, Table: "events"}
	if err := migrations.Up(ctx(t), pg.DSN, events); err != nil {
		t.Fatal(err)
	}
	e := setupOn(t, pg, events)
	var want []producer.Message
	for _, ep := range publicEntryPoints {
		msgs := immediate()[:1]
		x := ep.begin(e, t)
		if _, err := ep.write(ctx(t), e.w, x, msgs); err != nil {
			t.Fatalf("%s: %v", ep.name, err)
		}
		x.commit(t)
		want = append(want, msgs...)
	}
	checkRows(t, e.rows(t, events), want)
	if n := e.count(t, pg.Table); n != 0 {
		t.Fatalf("%s holds %d rows written for %s", pg.Table, n, events)
	}
}

func TestNewRefusesATableNameThatIsNotAPlainIdentifier(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    table.Name
	}{
		{"A statement smuggled into the table name is refused", table.Name{Schema: "outbox", Table: "x; drop table y"}},
		{"A statement smuggled into the schema name is refused", table.Name{Schema: "x; drop table y", Table: "messages"}},
		{"A quote in the table name is refused", table.Name{Schema: "outbox", Table: `messages"`}},
		{"An empty table name is refused", table.Name{Schema: "outbox"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := producer.New(tc.n)
			if err == nil || w != nil {
				t.Fatalf("New(%q) = %v, %v; want an error", tc.n, w, err)
			}
		})
	}
}

func TestThePackageFunctionsWriteToOutboxMessages(t *testing.T) {
	t.Parallel()
	dsn, pool := defaultTableDatabase(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	msgs := delayed()

	err = pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
		if _, err := producer.Enqueue(ctx(t), tx, msgs[0]); err != nil {
			return err
		}
		return producer.EnqueueBatch(ctx(t), tx, msgs[1:])
	})
	if err != nil {
		t.Fatal(err)
	}
	sqlTx, err := db.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.EnqueueSQL(ctx(t), sqlTx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	if err := producer.EnqueueBatchSQL(ctx(t), sqlTx, msgs[1:]); err != nil {
		t.Fatal(err)
	}
	if err := sqlTx.Commit(); err != nil {
		t.Fatal(err)
	}

	e := &env{pg: &testenv.PG{DSN: dsn, Table: table.Default, Pool: pool}}
	checkRows(t, e.rows(t, table.Default), append(msgs, msgs...))
}

func TestEnqueueWorksInEveryPgxQueryExecMode(t *testing.T) {
	t.Parallel()
	// Connection poolers in transaction mode are used with the modes that prepare nothing.
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run("Enqueue and both batch paths work in mode "+mode.String(), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			cfg, err := pgxpool.ParseConfig(e.pg.DSN)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			var want []producer.Message
			err = pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
				for _, m := range delayed() {
					if _, err := e.w.Enqueue(ctx(t), tx, m); err != nil {
						return err
					}
				}
				if err := e.w.EnqueueBatch(ctx(t), tx, immediate()); err != nil {
					return err
				}
				return e.w.EnqueueBatch(ctx(t), tx, delayed())
			})
			if err != nil {
				t.Fatal(err)
			}
			want = append(append(append(want, delayed()...), immediate()...), delayed()...)
			checkRows(t, e.rows(t, e.pg.Table), want)
		})
	}
}
