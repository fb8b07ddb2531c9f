package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// setupPartitioned is setup with the partitioned layout: an outbox table of t's own, in
// its own schema of the shared database, holding only its default partition.
func setupPartitioned(t *testing.T) *fixture {
	t.Helper()
	dsn := testenv.SharedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	n := table.Name{Schema: "tp_" + hex.EncodeToString(b), Table: "messages"}
	if err := migrations.Partitioned.Up(ctx, dsn, n); err != nil {
		t.Fatalf("migrate %s: %v", n, err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+table.Quote(n.Schema)+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", n.Schema, err)
		}
	})
	s, err := store.New(pool, n)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{pg: &testenv.PG{DSN: dsn, Table: n, Pool: pool}, store: s, ctx: ctx}
}

// today is the start of the current UTC day on the database clock.
func (f *fixture) today(t *testing.T) time.Time {
	t.Helper()
	var d time.Time
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT date_trunc('day', now(), 'UTC')`).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d.UTC()
}

// pastPartition attaches a day's partition in the past by hand: the store only creates
// current and future ones.
func (f *fixture) pastPartition(t *testing.T, day time.Time) string {
	t.Helper()
	name := f.pg.Table.Table + "_p" + day.Format("20060102")
	_, err := f.pg.Pool.Exec(f.ctx, fmt.Sprintf(`CREATE TABLE %s.%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		table.Quote(f.pg.Table.Schema), table.Quote(name), f.pg.Table.Qualified(),
		day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// exec runs SQL with the table's qualified name in place of {{table}}.
func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pg.Pool.Exec(f.ctx, strings.ReplaceAll(sql, "{{table}}", f.pg.Table.Qualified()), args...); err != nil {
		t.Fatal(err)
	}
}

// partitionOf names the partition holding row id.
func (f *fixture) partitionOf(t *testing.T, id int64) string {
	t.Helper()
	var name string
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT c.relname FROM `+f.pg.Table.Qualified()+` m
		JOIN pg_class c ON c.oid = m.tableoid WHERE m.id = $1`, id).Scan(&name); err != nil {
		t.Fatalf("partition of row %d: %v", id, err)
	}
	return name
}

func names(parts []store.PartitionInfo) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p.Name)
	}
	return out
}

func TestClaimAndEveryWriteBackWorkOnRowsSpreadOverPartitions(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	today := f.today(t)
	if _, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3); err != nil {
		t.Fatal(err)
	}
	f.pastPartition(t, today.AddDate(0, 0, -1))
	// Rows 1-2 yesterday, 3-4 today, 5-6 in the default partition (dated far ahead), all due.
	f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at, available_at)
		SELECT 'orders', 'topic.' || g, 'x', d, now() - interval '1 minute' + g * interval '1 second'
		FROM unnest(ARRAY[now() - interval '1 day', now() - interval '1 day', now(), now(), now() + interval '1 year', now() + interval '1 year'])
		     WITH ORDINALITY AS u(d, g) ORDER BY g`)
	homes := map[string]bool{}
	for id := int64(1); id <= 6; id++ {
		homes[f.partitionOf(t, id)] = true
	}
	if len(homes) != 3 || !homes[f.pg.Table.Table+"_default"] {
		t.Fatalf("rows are in partitions %v, want three including the default one", homes)
	}

	c := f.claim(t, "orders", 10)
	if ids := c.IDs(); len(ids) != 6 || ids[0] != 1 || ids[5] != 6 {
		t.Fatalf("claimed %v, want rows 1 to 6 in availability order", ids)
	}
	stale := store.NewToken()
	if res, err := f.store.Ack(f.ctx, stale, c.IDs()); err != nil || res.Changed != 0 || res.Refused != 6 {
		t.Fatalf("ack with a stale token: %+v %v", res, err)
	}
	if res, err := f.store.Ack(f.ctx, c.Token, []int64{1, 5}); err != nil || res.Changed != 2 {
		t.Fatalf("ack: %+v %v", res, err)
	}
	if res, err := f.store.Retry(f.ctx, c.Token, []store.Retry{{ID: 3, Delay: time.Hour, Err: "busy"}}); err != nil || res.Changed != 1 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if res, err := f.store.Release(f.ctx, c.Token, []int64{2, 6}); err != nil || res.Changed != 2 {
		t.Fatalf("release: %+v %v", res, err)
	}
	if res, err := f.store.Defer(f.ctx, c.Token, []store.Deferral{{ID: 4, Err: "down"}}, time.Hour); err != nil || res.Changed != 1 {
		t.Fatalf("defer: %+v %v", res, err)
	}
	if res, err := f.store.Ack(f.ctx, c.Token, c.IDs()); err != nil || res.Changed != 0 || res.Refused != 6 {
		t.Fatalf("second ack of rows no longer leased: %+v %v", res, err)
	}
	want := map[int64]string{1: "delivered", 2: "pending", 3: "pending", 4: "pending", 5: "delivered", 6: "pending"}
	for id, status := range want {
		if r := f.row(t, id); r.Status != status || r.LeaseToken != nil {
			t.Fatalf("row %d: %+v, want %s without a lease", id, r, status)
		}
	}
	if r := f.row(t, 3); r.Attempts != 1 || r.AvailableIn < 59*time.Minute {
		t.Fatalf("retried row: %+v", r)
	}
	// Rows 2, 4 and 6 are due again (4 was deferred without delay); 3 waits out its backoff.
	again := f.claim(t, "orders", 10)
	if ids := again.IDs(); len(ids) != 3 {
		t.Fatalf("second claim took %v, want rows 2, 4 and 6", ids)
	}
	if res, err := f.store.Fail(f.ctx, again.Token, []store.Failure{{ID: 6, Err: "too large", Attempted: true}}); err != nil || res.Changed != 1 {
		t.Fatalf("fail: %+v %v", res, err)
	}
	if r := f.row(t, 6); r.Status != "failed" || *r.LastError != "too large" || f.partitionOf(t, 6) != f.pg.Table.Table+"_default" {
		t.Fatalf("failed row: %+v", r)
	}
}

func TestPartitionsAreCreatedAheadFromTheCurrentUTCDay(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	if p, err := f.store.Partitioned(f.ctx); err != nil || !p {
		t.Fatalf("Partitioned = %v, %v", p, err)
	}
	before := f.today(t)
	created, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3)
	if err != nil {
		t.Fatal(err)
	}
	day := before
	if after := f.today(t); !strings.HasSuffix(created[0], after.Format("20060102")) {
		day = after // the day changed between the two readings
	}
	parts, err := f.store.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != 3 || len(parts) != 4 {
		t.Fatalf("created %v; partitions %v", created, names(parts))
	}
	for i, p := range parts[:3] {
		from := day.AddDate(0, 0, i)
		if p.Name != f.pg.Table.Table+"_p"+from.Format("20060102") || p.Name != created[i] || p.Default ||
			!p.From.Equal(from) || !p.To.Equal(from.AddDate(0, 0, 1)) {
			t.Fatalf("partition %d: %+v, want %s for [%s, %s)", i, p, created[i], from, from.AddDate(0, 0, 1))
		}
	}
	if d := parts[3]; !d.Default || d.Name != f.pg.Table.Table+"_default" || !d.From.IsZero() || !d.To.IsZero() {
		t.Fatalf("default partition: %+v", d)
	}
	again, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3)
	if err != nil || len(again) != 0 {
		t.Fatalf("second call created %v, %v", again, err)
	}
	// A shorter interval only fills what the day partitions leave uncovered: nothing here.
	if short, err := f.store.CreatePartitions(f.ctx, 6*time.Hour, 4); err != nil || len(short) != 0 {
		t.Fatalf("6h partitions inside covered days: %v, %v", short, err)
	}
}

func TestPartitionsShorterThanADayAreNamedWithTheirStartTime(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	created, err := f.store.CreatePartitions(f.ctx, 6*time.Hour, 4)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := f.store.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != 4 || len(parts) != 5 {
		t.Fatalf("created %v; partitions %v", created, names(parts))
	}
	for i, p := range parts[:4] {
		if p.From.Hour()%6 != 0 || p.From.Minute() != 0 || p.To.Sub(p.From) != 6*time.Hour ||
			(i > 0 && !p.From.Equal(parts[i-1].To)) || p.Name != f.pg.Table.Table+"_p"+p.From.Format("200601021504") {
			t.Fatalf("partition %d: %+v", i, p)
		}
	}
	// A minimum of two intervals: the next boundary is always covered ahead of time.
	if _, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	parts, err = f.store.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := parts[len(parts)-2]
	if tomorrow := f.today(t).AddDate(0, 0, 2); !last.To.Equal(tomorrow) {
		t.Fatalf("with ahead 1 the partitions end at %s, want the end of tomorrow %s", last.To, tomorrow)
	}
}

func TestARowDatedOutsideEveryPartitionLandsInTheDefaultPartition(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	if _, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3); err != nil {
		t.Fatal(err)
	}
	if n, err := f.store.DefaultPartitionRows(f.ctx); err != nil || n != 0 {
		t.Fatalf("default partition of a fresh table holds %d rows, %v", n, err)
	}
	f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at) VALUES
		('orders', 't', 'x', '2999-01-01'), ('orders', 't', 'x', '1999-01-01'), ('orders', 't', 'x', now())`)
	if n, err := f.store.DefaultPartitionRows(f.ctx); err != nil || n != 2 {
		t.Fatalf("DefaultPartitionRows = %d, %v; want the 2 rows dated far away", n, err)
	}
	if p := f.partitionOf(t, 3); p != f.pg.Table.Table+"_p"+f.today(t).Format("20060102") {
		t.Fatalf("a row dated now went to %s", p)
	}
	// They are claimed like any other.
	if c := f.claim(t, "orders", 10); len(c.Messages) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(c.Messages))
	}
}

func TestCreatingAPartitionOverRowsInTheDefaultPartitionFailsNamingBoth(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	tomorrow := f.today(t).AddDate(0, 0, 1)
	// Before any partition exists, three rows are dated tomorrow.
	f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at)
		SELECT 'orders', 't', 'x', $1::timestamptz + g * interval '1 hour' FROM generate_series(1, 3) g`, tomorrow)
	created, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3)
	var overlap *store.PartitionOverlapError
	if !errors.As(err, &overlap) {
		t.Fatalf("CreatePartitions: %v, want a PartitionOverlapError", err)
	}
	want := f.pg.Table.Table + "_p" + tomorrow.Format("20060102")
	if overlap.Partition != want || overlap.Default != f.pg.Table.Table+"_default" || overlap.Rows != 3 ||
		!overlap.From.Equal(tomorrow) || !overlap.To.Equal(tomorrow.AddDate(0, 0, 1)) {
		t.Fatalf("overlap error: %+v", overlap)
	}
	if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "holds 3 rows") {
		t.Fatalf("error message does not name the partition and the rows: %s", msg)
	}
	// The other ranges were still created; the rows were not moved.
	if len(created) != 2 || strings.Contains(strings.Join(created, " "), want) {
		t.Fatalf("created %v alongside the error", created)
	}
	if n, err := f.store.DefaultPartitionRows(f.ctx); err != nil || n != 3 {
		t.Fatalf("default partition holds %d rows, %v", n, err)
	}
}

func TestAnExpiredPartitionIsDroppedOnlyWhenEveryRowInItIsDeliveredPastRetention(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	if _, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3); err != nil {
		t.Fatal(err)
	}
	today := f.today(t)
	const retention = 24 * time.Hour
	// Each case is one day partition ten or more days old, with rows as described; the
	// statements fill it with delivered rows published long ago plus the one that matters.
	cases := []struct {
		name string
		rows string // extra rows: status, published_at, last_error, lease columns
		drop bool
	}{
		{"a fully delivered partition is dropped", ``, true},
		{"an empty partition is dropped", `-`, true},
		{"a pending row keeps its partition", `('pending', NULL, NULL, NULL, NULL, NULL)`, false},
		{"a leased row keeps its partition", `('leased', NULL, NULL, gen_random_uuid(), now() + interval '1 minute', 'r')`, false},
		{"a failed row keeps its partition", `('failed', NULL, 'broken', NULL, NULL, NULL)`, false},
		{"a row delivered within retention keeps its partition", `('delivered', now() - interval '1 hour', NULL, NULL, NULL, NULL)`, false},
	}
	partitionOfCase := map[string]string{}
	for i, c := range cases {
		day := today.AddDate(0, 0, -10-i)
		name := f.pastPartition(t, day)
		partitionOfCase[c.name] = name
		if c.rows == "-" {
			continue
		}
		f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at, status, published_at)
			SELECT 'orders', 't', 'x', $1::timestamptz + g * interval '1 minute', 'delivered', $1::timestamptz + interval '1 day'
			FROM generate_series(1, 100) g`, day)
		if c.rows != "" {
			f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at, status, published_at, last_error, lease_token, lease_until, owner)
				SELECT 'orders', 't', 'x', $1::timestamptz + interval '12 hours', v.s, v.p::timestamptz, v.e, v.tok::uuid, v.lu::timestamptz, v.o
				FROM (VALUES `+c.rows+`) AS v(s, p, e, tok, lu, o)`, day)
		}
	}
	// Yesterday's partition is fully delivered but not expired: its upper bound is today.
	yesterday := f.pastPartition(t, today.AddDate(0, 0, -1))
	f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at, status, published_at)
		VALUES ('orders', 't', 'x', $1::timestamptz, 'delivered', $1::timestamptz)`, today.AddDate(0, 0, -1))
	// A row in the default partition dated long ago is never dropped with anything.
	f.exec(t, `INSERT INTO {{table}} (stream, topic, payload, created_at, status, published_at)
		VALUES ('orders', 't', 'x', '2001-01-01', 'delivered', '2001-01-01')`)

	dropped, err := f.store.DropExpiredPartitions(f.ctx, retention)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := f.store.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	remaining := map[string]bool{}
	for _, p := range parts {
		remaining[p.Name] = true
	}
	for _, c := range cases {
		name := partitionOfCase[c.name]
		if remaining[name] == c.drop {
			t.Errorf("%s: %s remaining=%v (dropped %v)", c.name, name, remaining[name], dropped)
		}
	}
	if len(dropped) != 2 || !remaining[yesterday] || !remaining[f.pg.Table.Table+"_default"] || len(parts) != 1+4+3+1 {
		t.Errorf("dropped %v, remaining %v", dropped, names(parts))
	}
	if n, err := f.store.DefaultPartitionRows(f.ctx); err != nil || n != 1 {
		t.Errorf("default partition holds %d rows, %v", n, err)
	}
	// A kept partition's rows are untouched, and a second run drops nothing more.
	var kept int
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE status <> 'delivered'`).Scan(&kept); err != nil || kept != 3 {
		t.Errorf("%d undelivered rows left, want 3 (%v)", kept, err)
	}
	if again, err := f.store.DropExpiredPartitions(f.ctx, retention); err != nil || len(again) != 0 {
		t.Errorf("second run dropped %v, %v", again, err)
	}
}

func TestADropWaitsForAnUncommittedOldInsertAndThenKeepsThePartition(t *testing.T) {
	t.Parallel()
	f := setupPartitioned(t)
	old := f.pastPartition(t, f.today(t).AddDate(0, 0, -30))
	producer := testenv.Connect(t, f.pg.DSN)
	tx, err := producer.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	// A producer's transaction writes a pending row with an explicit old created_at into
	// the otherwise empty, expired partition, and has not committed yet.
	if _, err := tx.Exec(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload, created_at)
		VALUES ('orders', 't', 'x', now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}

	// While it stays open, the drop gives up after its lock timeout and says so.
	if dropped, err := f.store.DropExpiredPartitions(f.ctx, time.Hour); len(dropped) != 0 || err == nil ||
		!strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("drop while the insert is open: dropped %v, err %v", dropped, err)
	}

	// Started again, the drop waits for the producer's lock; the producer commits.
	type result struct {
		dropped []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		d, err := f.store.DropExpiredPartitions(f.ctx, time.Hour)
		done <- result{d, err}
	}()
	for waiting := false; !waiting; {
		select {
		case r := <-done:
			t.Fatalf("the drop returned without waiting for the open insert: %v %v", r.dropped, r.err)
		default:
		}
		if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND relation = $1::regclass`,
			f.pg.Table.Qualified()).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.dropped) != 0 {
		t.Fatalf("after the insert committed: dropped %v, err %v", r.dropped, r.err)
	}
	if p := f.partitionOf(t, 1); p != old {
		t.Fatalf("the committed row is in %s, want %s", p, old)
	}
}

func TestPartitionUpkeepRefusesAPlainTable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if p, err := f.store.Partitioned(f.ctx); err != nil || p {
		t.Fatalf("Partitioned on a plain table = %v, %v", p, err)
	}
	if _, err := f.store.CreatePartitions(f.ctx, 24*time.Hour, 3); err == nil || !strings.Contains(err.Error(), "not partitioned") {
		t.Fatalf("CreatePartitions on a plain table: %v", err)
	}
	if _, err := f.store.DropExpiredPartitions(f.ctx, time.Hour); err == nil || !strings.Contains(err.Error(), "not partitioned") {
		t.Fatalf("DropExpiredPartitions on a plain table: %v", err)
	}
	missing, err := store.New(f.pg.Pool, table.Name{Schema: f.pg.Table.Schema, Table: "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Partitioned(f.ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Partitioned on a missing table: %v", err)
	}
}
