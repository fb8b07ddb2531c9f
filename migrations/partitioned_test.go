package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// relkind reads pg_class.relkind of n's table, "" when it does not exist.
func relkind(t *testing.T, ctx context.Context, conn *pgx.Conn, n table.Name) string {
	t.Helper()
	var kind string
	err := conn.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relname = $2`, n.Schema, n.Table).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return kind
}

// partitioned migrates n with the partitioned layout in a database of t's own.
func partitioned(t *testing.T, n table.Name) (*pgx.Conn, context.Context, string) {
	t.Helper()
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	if err := migrations.Partitioned.Up(ctx, dsn, n); err != nil {
		t.Fatalf("up %s: %v", n, err)
	}
	return conn, ctx, dsn
}

// addPartition attaches a time partition by hand, as the store would at run time.
func addPartition(t *testing.T, ctx context.Context, conn *pgx.Conn, n table.Name, from, to time.Time) {
	t.Helper()
	name := table.Quote(n.Schema) + "." + table.Quote(n.Table+"_p"+from.UTC().Format("20060102"))
	_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		name, n.Qualified(), from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
}

func TestBothLayoutsCarryTheSameVersions(t *testing.T) {
	t.Parallel()
	plain, err := migrations.Plain.Versions()
	if err != nil {
		t.Fatal(err)
	}
	part, err := migrations.Partitioned.Versions()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plain, part) || len(plain) == 0 || plain[len(plain)-1] != migrations.Latest() {
		t.Fatalf("plain layout has versions %v, partitioned %v, latest %d", plain, part, migrations.Latest())
	}
	for _, l := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		for _, dir := range []string{"up", "down"} {
			script, err := l.Script(table.Default, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(script, "\n-- 0"); got != len(plain)-1 || !strings.HasPrefix(script, "-- 0") {
				t.Fatalf("%s %s script does not hold one file per version:\n%s", l, dir, script)
			}
		}
	}
}

func TestPartitionedLayoutUpDownUpOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	n := table.Default
	conn, ctx, dsn := partitioned(t, n)
	for round := 0; round < 2; round++ {
		if round == 1 {
			if err := migrations.Partitioned.Up(ctx, dsn, n); err != nil {
				t.Fatalf("up again: %v", err)
			}
		}
		if v, dirty := version(t, ctx, dsn, n); v != migrations.Latest() || dirty {
			t.Fatalf("round %d: version %d dirty %v", round, v, dirty)
		}
		if k := relkind(t, ctx, conn, n); k != "p" {
			t.Fatalf("round %d: relkind %q, want a partitioned table", round, k)
		}
		if tb, fn, vw := objects(t, ctx, conn, n); tb != 1 || fn != wantFunctions || vw != 1 {
			t.Fatalf("round %d: %d tables, %d functions, %d views", round, tb, fn, vw)
		}
		var def string
		if err := conn.QueryRow(ctx, `SELECT partdefid::regclass::text FROM pg_partitioned_table
			WHERE partrelid = $1::regclass`, n.Qualified()).Scan(&def); err != nil || def != "outbox.messages_default" {
			t.Fatalf("round %d: default partition %q, %v", round, def, err)
		}
		if round == 1 {
			break
		}
		// A partition made at run time goes with the table.
		day := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
		addPartition(t, ctx, conn, n, day, day.AddDate(0, 0, 1))
		m, err := migrations.Partitioned.Open(ctx, dsn, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Down(0); err != nil {
			t.Fatalf("down: %v", err)
		}
		m.Close()
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
			WHERE s.nspname = 'outbox' AND c.relname LIKE 'messages%' AND c.relname NOT LIKE 'messages\_schema\_migrations%'`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("down left %d relations (%v)", left, err)
		}
	}
}

func TestPartitionedLayoutWorksUnderNonDefaultNames(t *testing.T) {
	t.Parallel()
	// "order" is a reserved word; a plain table shares the schema.
	a := table.Name{Schema: "shop", Table: "order"}
	b := table.Name{Schema: "shop", Table: "billing_outbox"}
	conn, ctx, dsn := partitioned(t, a)
	if err := migrations.Up(ctx, dsn, b); err != nil {
		t.Fatal(err)
	}
	if ka, kb := relkind(t, ctx, conn, a), relkind(t, ctx, conn, b); ka != "p" || kb != "r" {
		t.Fatalf("relkinds %q and %q", ka, kb)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+a.ListenChannel()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+a.Qualified()+` (stream, topic, payload) VALUES ('orders', 't', 'x')`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if note, err := conn.WaitForNotification(wctx); err != nil || note.Channel != a.Channel() || note.Payload != "orders" {
		t.Fatalf("notification %+v, %v", note, err)
	}
	var where string
	if err := conn.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+a.Qualified()).Scan(&where); err != nil || where != `shop.order_default` {
		t.Fatalf("row stored in %q (%v), want the default partition shop.order_default", where, err)
	}
	var requeued int64
	if err := conn.QueryRow(ctx, `SELECT `+a.Derived("requeue_failed")+`()`).Scan(&requeued); err != nil || requeued != 0 {
		t.Fatalf("requeue_failed on %s: %d %v", a, requeued, err)
	}
	m, err := migrations.Partitioned.Open(ctx, dsn, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Down(0); err != nil { // every version
		t.Fatal(err)
	}
	m.Close()
	if tb, fn, vw := objects(t, ctx, conn, b); tb != 1 || fn != wantFunctions || vw != 1 {
		t.Fatalf("reverting %s damaged %s: %d tables, %d functions, %d views", a, b, tb, fn, vw)
	}
}

func TestThePartitionedFilesAsTheyStandApplyWithPlainSQL(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	for _, dir := range []string{"up", "down", "up"} {
		script, err := migrations.Partitioned.Script(table.Default, dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, script); err != nil {
			t.Fatalf("%s script: %v", dir, err)
		}
	}
	if k := relkind(t, ctx, conn, table.Default); k != "p" {
		t.Fatalf("script made relkind %q", k)
	}
}

func TestMigrateRefusesATableCreatedWithTheOtherLayout(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	plain := table.Name{Schema: "outbox", Table: "plain"}
	part := table.Name{Schema: "outbox", Table: "part"}
	if err := migrations.Up(ctx, dsn, plain); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Partitioned.Up(ctx, dsn, part); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		layout migrations.Layout
		table  table.Name
		want   string
	}{
		{"the partitioned layout refuses a plain table", migrations.Partitioned, plain, `outbox.plain has the plain layout (pg_class.relkind = 'r') but the partitioned layout was asked for`},
		{"the plain layout refuses a partitioned table", migrations.Plain, part, `outbox.part has the partitioned layout (pg_class.relkind = 'p') but the plain layout was asked for`},
	}
	for _, c := range cases {
		m, err := c.layout.Open(ctx, dsn, c.table)
		if err != nil {
			t.Fatal(err)
		}
		upErr := m.Up()
		downErr := m.Down(0)
		m.Close()
		for op, err := range map[string]error{"up": upErr, "down": downErr} {
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "docs/partitioning.md") {
				t.Errorf("%s: %s: %v", c.name, op, err)
			}
		}
		if v, _ := version(t, ctx, dsn, c.table); v != migrations.Latest() {
			t.Errorf("%s: the refused migration moved the version to %d", c.name, v)
		}
	}
	if relkind(t, ctx, conn, plain) != "r" || relkind(t, ctx, conn, part) != "p" {
		t.Fatal("a refused migration changed a table")
	}
}

// pgError runs sql and returns the PostgreSQL error it raised, nil if none.
func pgError(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) *pgconn.PgError {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, sql)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("%s: %v", sql, err)
	}
	return pgErr
}

func TestAProducersInsertIsRefusedAlikeOnBothLayouts(t *testing.T) {
	t.Parallel()
	plain := table.Name{Schema: "outbox", Table: "plain"}
	part := table.Name{Schema: "outbox", Table: "part"}
	conn, ctx, dsn := partitioned(t, part)
	if err := migrations.Up(ctx, dsn, plain); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, columns, values string
		code, constraint      string // "" code: accepted
	}{
		{"a complete message is accepted", "stream, topic, key, headers, payload, message_id", `'s', 't', 'k', '{"a": "b"}', 'x', 'm-1'`, "", ""},
		{"a message dated far in the future is accepted", "stream, topic, payload, created_at", `'s', 't', 'x', '2999-01-01'`, "", ""},
		{"an empty stream is refused", "stream, topic, payload", `'', 't', 'x'`, "23514", "_stream_not_empty"},
		{"an empty topic is refused", "stream, topic, payload", `'s', '', 'x'`, "23514", "_topic_not_empty"},
		{"headers that are not an object are refused", "stream, topic, payload, headers", `'s', 't', 'x', '[]'`, "23514", "_headers_object"},
		{"a header value that is not a string is refused", "stream, topic, payload, headers", `'s', 't', 'x', '{"n": 1}'`, "23514", "_headers_string_values"},
		{"an empty message id is refused", "stream, topic, payload, message_id", `'s', 't', 'x', ''`, "23514", "_message_id_not_empty"},
		{"a missing payload is refused", "stream, topic", `'s', 't'`, "23502", ""},
		{"an unknown status is refused", "stream, topic, payload, status", `'s', 't', 'x', 'sent'`, "23514", "_status_domain"},
		{"a producer's own id is refused", "id, stream, topic, payload", `42, 's', 't', 'x'`, "428C9", ""},
	}
	// outcome is the SQLSTATE and the constraint name without the table's prefix.
	outcome := func(n table.Name, c string, v string) string {
		err := pgError(t, ctx, conn, `INSERT INTO `+n.Qualified()+` (`+c+`) VALUES (`+v+`)`)
		if err == nil {
			return ""
		}
		return err.Code + " " + strings.TrimPrefix(err.ConstraintName, n.Table)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := ""
			if c.code != "" {
				want = c.code + " " + c.constraint
			}
			onPlain, onPart := outcome(plain, c.columns, c.values), outcome(part, c.columns, c.values)
			if onPlain != want || onPart != want {
				t.Fatalf("plain layout: %q, partitioned layout: %q; want %q", onPlain, onPart, want)
			}
		})
	}
}

func TestStatsViewAndRequeueWorkAcrossPartitions(t *testing.T) {
	t.Parallel()
	n := table.Default
	conn, ctx, _ := partitioned(t, n)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	addPartition(t, ctx, conn, n, today.AddDate(0, 0, -1), today)
	addPartition(t, ctx, conn, n, today, today.AddDate(0, 0, 1))
	// Rows of stream a in yesterday's partition, today's and the default one.
	_, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload, status, last_error, published_at, created_at)
		VALUES ('a', 't', 'x', 'failed', 'no', NULL, now() - interval '1 day'),
		       ('a', 't', 'x', 'failed', 'no', NULL, now()),
		       ('a', 't', 'x', 'pending', NULL, NULL, now() - interval '1 day'),
		       ('a', 't', 'x', 'delivered', NULL, now(), now() + interval '5 days'),
		       ('b', 't', 'x', 'failed', 'no', NULL, now() + interval '5 days')`)
	if err != nil {
		t.Fatal(err)
	}
	var spread int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM outbox.messages`).Scan(&spread); err != nil || spread != 3 {
		t.Fatalf("rows spread over %d partitions (%v), want 3", spread, err)
	}
	var pending, delivered, failed int
	if err := conn.QueryRow(ctx, `SELECT pending, delivered, failed FROM outbox.messages_stats WHERE stream = 'a'`).
		Scan(&pending, &delivered, &failed); err != nil || pending != 1 || delivered != 1 || failed != 2 {
		t.Fatalf("stats of a: pending %d delivered %d failed %d (%v)", pending, delivered, failed, err)
	}
	if _, err := conn.Exec(ctx, `LISTEN "outbox.messages"`); err != nil {
		t.Fatal(err)
	}
	var requeued int64
	if err := conn.QueryRow(ctx, `SELECT outbox.messages_requeue_failed('a')`).Scan(&requeued); err != nil || requeued != 2 {
		t.Fatalf("requeue_failed('a') = %d, %v", requeued, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if note, err := conn.WaitForNotification(wctx); err != nil || note.Payload != "a" {
		t.Fatalf("requeue did not wake stream a: %v %v", note, err)
	}
	if err := conn.QueryRow(ctx, `SELECT outbox.messages_requeue(array(SELECT id FROM outbox.messages WHERE stream = 'b'))`).Scan(&requeued); err != nil || requeued != 1 {
		t.Fatalf("requeue of b's row in the default partition = %d, %v", requeued, err)
	}
	if err := conn.QueryRow(ctx, `SELECT pending, failed FROM outbox.messages_stats WHERE stream = 'a'`).Scan(&pending, &failed); err != nil || pending != 3 || failed != 0 {
		t.Fatalf("stats of a after requeue: pending %d failed %d (%v)", pending, failed, err)
	}
}

func TestTheNotifyTriggerFiresOncePerStreamForRowsSpreadOverPartitions(t *testing.T) {
	t.Parallel()
	n := table.Default
	conn, ctx, dsn := partitioned(t, n)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	addPartition(t, ctx, conn, n, today.AddDate(0, 0, -1), today)
	addPartition(t, ctx, conn, n, today, today.AddDate(0, 0, 1))
	if _, err := conn.Exec(ctx, `LISTEN "outbox.messages"`); err != nil {
		t.Fatal(err)
	}
	writer, wctx := connect(t, dsn)
	await := func(what string, want ...string) {
		t.Helper()
		var got []string
		for len(got) < len(want) {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			note, err := conn.WaitForNotification(c)
			cancel()
			if err != nil {
				t.Fatalf("%s: got %v, then %v", what, got, err)
			}
			got = append(got, note.Payload)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: notified %v, want %v", what, got, want)
		}
	}
	// One statement, rows for three partitions and two streams.
	if _, err := writer.Exec(wctx, `INSERT INTO outbox.messages (stream, topic, payload, created_at)
		VALUES ('a', 't', 'x', now() - interval '1 day'), ('a', 't', 'x', now()), ('b', 't', 'x', now() + interval '9 days')`); err != nil {
		t.Fatal(err)
	}
	await("multi-row INSERT", "a", "b")
	// COPY, as the producer package uses for batches.
	rows := [][]any{{"c", "t", []byte("x"), time.Now().Add(-24 * time.Hour)}, {"c", "t", []byte("x"), time.Now().Add(48 * time.Hour)}}
	if _, err := writer.CopyFrom(wctx, pgx.Identifier{"outbox", "messages"}, []string{"stream", "topic", "payload", "created_at"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	await("COPY", "c")
	// A row that is not yet due wakes nobody: the next notification is d's.
	if _, err := writer.Exec(wctx, `INSERT INTO outbox.messages (stream, topic, payload, available_at) VALUES ('later', 't', 'x', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(wctx, `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('d', 't', 'x')`); err != nil {
		t.Fatal(err)
	}
	await("a delayed row, then a due one", "d")
}

// The partitioned layout must keep the plain layout's columns, constraints, indexes,
// trigger, functions and view; only the primary key and the partitioning differ.
func TestBothLayoutsDefineTheSameColumnsConstraintsIndexesTriggerFunctionsAndView(t *testing.T) {
	t.Parallel()
	plain := table.Name{Schema: "outbox", Table: "messages"}
	part := table.Name{Schema: "zz_part", Table: "messages"}
	conn, ctx, dsn := partitioned(t, part)
	if err := migrations.Up(ctx, dsn, plain); err != nil {
		t.Fatal(err)
	}
	describe := func(n table.Name) map[string][]string {
		t.Helper()
		// norm drops the schema from a definition, quoted or not.
		norm := func(expr string) string {
			return fmt.Sprintf(`replace(replace(%s, '"' || $2 || '".', ''), $2 || '.', '')`, expr)
		}
		queries := map[string]string{
			"columns": `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' ||
				a.attidentity::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || coalesce(col_description(c.oid, a.attnum), '')
				FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
				WHERE c.oid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
			"constraints": `SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
				WHERE conrelid = $1::regclass AND contype <> 'p' ORDER BY conname`,
			"indexes": `SELECT c.relname || ' ' || regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '')
				FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass AND NOT i.indisprimary ORDER BY 1`,
			"triggers": `SELECT tgname || ' ' || ` + norm("pg_get_triggerdef(oid)") + ` FROM pg_trigger
				WHERE tgrelid = $1::regclass AND NOT tgisinternal ORDER BY tgname`,
			"functions": `SELECT p.proname || ' ' || pg_get_function_arguments(p.oid) || ' ' || ` + norm("p.prosrc") + `
				FROM pg_proc p WHERE p.pronamespace = (SELECT relnamespace FROM pg_class WHERE oid = $1::regclass) ORDER BY 1`,
			"view": `SELECT ` + norm(`pg_get_viewdef((SELECT oid FROM pg_class WHERE relname = 'messages_stats'
				AND relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = $1::regclass)))`),
		}
		out := map[string][]string{}
		for what, q := range queries {
			args := []any{n.Qualified()}
			if strings.Contains(q, "$2") {
				args = append(args, n.Schema)
			}
			rows, err := conn.Query(ctx, q, args...)
			if err != nil {
				t.Fatalf("%s of %s: %v", what, n, err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s of %s: %v", what, n, err)
			}
			out[what] = got
		}
		return out
	}
	want, got := describe(plain), describe(part)
	for what, w := range want {
		if len(w) == 0 {
			t.Errorf("the plain table has no %s: the comparison is broken", what)
		}
		if !slices.Equal(w, got[what]) {
			t.Errorf("%s differ:\nplain:       %q\npartitioned: %q", what, w, got[what])
		}
	}
	var pk string
	if err := conn.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`,
		part.Qualified()).Scan(&pk); err != nil || pk != "PRIMARY KEY (id, created_at)" {
		t.Fatalf("partitioned primary key %q, %v", pk, err)
	}
}
