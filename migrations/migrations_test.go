package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func connect(t *testing.T, dsn string) (*pgx.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, ctx
}

// wantFunctions is how many functions the migrations create per table: notify, requeue,
// requeue_failed, skip and lock_key, and replay_plan, replay_start, replay and
// replay_cancel (0007).
const wantFunctions = 9

// objects counts what the migration created for n: the table, its functions and view.
func objects(t *testing.T, ctx context.Context, conn *pgx.Conn, n table.Name) (tables, functions, views int) {
	t.Helper()
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2),
		(SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = $1 AND p.proname LIKE $2 || '\_%'),
		(SELECT count(*) FROM pg_views WHERE schemaname = $1 AND viewname LIKE $2 || '\_%')`,
		n.Schema, n.Table).Scan(&tables, &functions, &views)
	if err != nil {
		t.Fatal(err)
	}
	return tables, functions, views
}

func version(t *testing.T, ctx context.Context, dsn string, n table.Name) (uint, bool) {
	t.Helper()
	m, err := migrations.Open(ctx, dsn, n)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, dirty, err := m.Version()
	if err != nil {
		t.Fatal(err)
	}
	return v, dirty
}

func TestUpDownUpOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	n := table.Default

	if v, _ := version(t, ctx, dsn, n); v != 0 {
		t.Fatalf("fresh database at version %d", v)
	}
	for round := 0; round < 2; round++ {
		if err := migrations.Up(ctx, dsn, n); err != nil {
			t.Fatalf("round %d up: %v", round, err)
		}
		if v, dirty := version(t, ctx, dsn, n); v != migrations.Latest() || dirty {
			t.Fatalf("after up: version %d dirty %v, want %d", v, dirty, migrations.Latest())
		}
		if tb, fn, vw := objects(t, ctx, conn, n); tb != 1 || fn != wantFunctions || vw != 1 {
			t.Fatalf("after up: %d tables, %d functions, %d views", tb, fn, vw)
		}
		if err := migrations.Up(ctx, dsn, n); err != nil {
			t.Fatalf("up at the latest version is not a no-op: %v", err)
		}
		if round == 1 {
			break
		}
		m, err := migrations.Open(ctx, dsn, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Down(0); err != nil {
			t.Fatalf("down: %v", err)
		}
		m.Close()
		if v, _ := version(t, ctx, dsn, n); v != 0 {
			t.Fatalf("after down: version %d", v)
		}
		if tb, fn, vw := objects(t, ctx, conn, n); tb+fn+vw != 0 {
			t.Fatalf("down left %d tables, %d functions, %d views", tb, fn, vw)
		}
	}
}

func TestNonDefaultNamesWorkSideBySideInOneSchema(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	// "order" is a reserved word: quoting must keep it usable.
	a := table.Name{Schema: "shop", Table: "order"}
	b := table.Name{Schema: "shop", Table: "billing_outbox"}
	for _, n := range []table.Name{a, b} {
		if err := migrations.Up(ctx, dsn, n); err != nil {
			t.Fatalf("up %s: %v", n, err)
		}
	}
	// Each table gets its own notification channel and functions.
	if _, err := conn.Exec(ctx, `LISTEN `+a.ListenChannel()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+b.Qualified()+` (stream, topic, payload) VALUES ('billing', 't', 'x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+a.Qualified()+` (stream, topic, payload) VALUES ('orders', 't', 'x')`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	note, err := conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification for %s: %v", a, err)
	}
	if note.Channel != a.Channel() || note.Payload != "orders" {
		t.Fatalf("notification %q on %q, want stream orders on %q", note.Payload, note.Channel, a.Channel())
	}
	var requeued int64
	if err := conn.QueryRow(ctx, `SELECT `+b.Derived("requeue_failed")+`()`).Scan(&requeued); err != nil || requeued != 0 {
		t.Fatalf("requeue on %s: %d %v", b, requeued, err)
	}
	// Reverting one table leaves the other and its version alone.
	m, err := migrations.Open(ctx, dsn, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Down(0); err != nil { // every version
		t.Fatal(err)
	}
	m.Close()
	if tb, fn, vw := objects(t, ctx, conn, a); tb != 1 || fn != wantFunctions || vw != 1 {
		t.Fatalf("reverting %s damaged %s: %d tables, %d functions, %d views", b, a, tb, fn, vw)
	}
	if v, _ := version(t, ctx, dsn, a); v != migrations.Latest() {
		t.Fatalf("%s at version %d", a, v)
	}
	if v, _ := version(t, ctx, dsn, b); v != 0 {
		t.Fatalf("%s at version %d after down", b, v)
	}
}

func TestTheFilesAsTheyStandApplyWithPlainSQL(t *testing.T) {
	t.Parallel()
	// What psql or the migrate CLI would run: the default-named files, unrendered.
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	for _, dir := range []string{"up", "down", "up"} {
		script, err := migrations.Script(table.Default, dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, script); err != nil {
			t.Fatalf("%s script: %v", dir, err)
		}
	}
	if tb, _, _ := objects(t, ctx, conn, table.Default); tb != 1 {
		t.Fatal("script did not create the table")
	}
}

func TestRequeueResetsEveryColumnOfAFailedMessageAndWakesItsStream(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	conn, ctx := connect(t, pg.DSN)
	q := pg.Table.Qualified()
	_, err := conn.Exec(ctx, `INSERT INTO `+q+` (stream, topic, payload, status, attempts, last_error)
		VALUES ('a', 't', 'x', 'failed', 7, 'too large'), ('b', 't', 'x', 'failed', 3, 'denied'), ('a', 't', 'x', 'pending', 2, NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pg.Table.ListenChannel()); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := conn.QueryRow(ctx, `SELECT `+pg.Table.Derived("requeue_failed")+`('a')`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("requeue_failed('a') = %d, %v", n, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if note, err := conn.WaitForNotification(wctx); err != nil || note.Payload != "a" {
		t.Fatalf("requeue did not wake stream a: %v %v", note, err)
	}
	var status string
	var attempts int
	var lastError *string
	var due bool
	err = conn.QueryRow(ctx, `SELECT status, attempts, last_error, available_at <= now() FROM `+q+` WHERE stream = 'a' AND id = 1`).
		Scan(&status, &attempts, &lastError, &due)
	if err != nil || status != "pending" || attempts != 0 || lastError != nil || !due {
		t.Fatalf("requeued row: %s attempts=%d last_error=%v due=%v err=%v", status, attempts, lastError, due, err)
	}
	// By id: only failed rows are touched.
	if err := conn.QueryRow(ctx, `SELECT `+pg.Table.Derived("requeue")+`(ARRAY[2, 3]::bigint[])`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("requeue(2,3) = %d, %v", n, err)
	}
	var pendingAttempts int
	if err := conn.QueryRow(ctx, `SELECT attempts FROM `+q+` WHERE id = 3`).Scan(&pendingAttempts); err != nil || pendingAttempts != 2 {
		t.Fatalf("requeue touched a pending row: attempts=%d %v", pendingAttempts, err)
	}
}

func TestStatsViewCountsByStatusPerStream(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	conn, ctx := connect(t, pg.DSN)
	_, err := conn.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, payload, status, last_error, published_at, deferred_since, created_at)
		VALUES ('a', 't', 'x', 'pending', NULL, NULL, NULL, now() - interval '1 hour'),
		       ('a', 't', 'x', 'pending', 'down', NULL, now(), now()),
		       ('a', 't', 'x', 'delivered', NULL, now(), NULL, now() - interval '2 hours'),
		       ('a', 't', 'x', 'failed', 'no', NULL, NULL, now()),
		       ('b', 't', 'x', 'delivered', NULL, now(), NULL, now())`)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT stream, pending, deferred, leased, delivered, failed,
		coalesce(extract(epoch FROM oldest_pending_age), -1) FROM `+pg.Table.Derived("stats")+` ORDER BY stream`)
	if err != nil {
		t.Fatal(err)
	}
	type stat struct {
		stream                                     string
		pending, deferred, leased, delivered, fail int
		age                                        float64
	}
	var got []stat
	for rows.Next() {
		var s stat
		if err := rows.Scan(&s.stream, &s.pending, &s.deferred, &s.leased, &s.delivered, &s.fail, &s.age); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if len(got) != 2 {
		t.Fatalf("stats: %+v", got)
	}
	a, b := got[0], got[1]
	if a.pending != 2 || a.deferred != 1 || a.leased != 0 || a.delivered != 1 || a.fail != 1 || a.age < 3590 || a.age > 3700 {
		t.Fatalf("stream a: %+v", a)
	}
	if b.delivered != 1 || b.pending != 0 || b.age != -1 {
		t.Fatalf("stream b: %+v", b)
	}
}

func TestRenderRefusesAnInjectedName(t *testing.T) {
	t.Parallel()
	for _, n := range []table.Name{{Schema: "outbox", Table: "x; drop table y"}, {Schema: `a"b`, Table: "m"}} {
		if _, err := migrations.Render(n); err == nil || !strings.Contains(err.Error(), "identifier") {
			t.Fatalf("render %q: %v", n, err)
		}
	}
}

func TestReplicasMigratingANewSchemaAtTheSameInstantAllSucceed(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := 0; round < 5; round++ {
		n := table.Name{Schema: fmt.Sprintf("race_%d", round), Table: "messages"}
		errs := make(chan error, 4)
		start := make(chan struct{})
		for i := 0; i < 4; i++ {
			go func() {
				<-start
				errs <- migrations.Up(ctx, dsn, n)
			}()
		}
		close(start)
		for i := 0; i < 4; i++ {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a replica migrating at the same instant failed: %v", round, err)
			}
		}
	}
}
