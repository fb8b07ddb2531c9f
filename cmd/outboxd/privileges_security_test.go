package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the producer's second client

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/table"
)

// leastPrivilegeGrants is the setup docs/security.md documents, for the default table:
// the owner (who ran the migrations) grants the dispatcher what it reads and writes
// back, and the producer what it inserts. %[1]s is the dispatcher role, %[2]s the
// producer role, %[3]s the database.
const leastPrivilegeGrants = `
REVOKE ALL ON DATABASE %[3]s FROM PUBLIC;
GRANT CONNECT ON DATABASE %[3]s TO %[1]s, %[2]s;
GRANT USAGE ON SCHEMA outbox TO %[1]s, %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox.messages TO %[1]s;
GRANT SELECT ON outbox.messages_schema_migrations TO %[1]s;
GRANT SELECT, INSERT, UPDATE ON outbox.messages_purged TO %[1]s;
GRANT SELECT ON outbox.messages_replays TO %[1]s;
GRANT INSERT (stream, topic, key, headers, payload, available_at, message_id), SELECT (id)
    ON outbox.messages TO %[2]s;
`

// withUser is dsn connecting as role.
func withUser(t *testing.T, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	must(t, err)
	u.User = url.User(role)
	return u.String()
}

// createRoles creates login roles with unique names (roles are cluster-wide, and tests
// run in parallel and again) and drops them, with everything granted to them in db,
// when t ends.
func createRoles(t *testing.T, ctx context.Context, admin *pgx.Conn, prefixes ...string) []string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	var roles []string
	for _, p := range prefixes {
		role := p + "_" + suffix
		if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
			t.Fatal(err)
		}
		roles = append(roles, role)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list := strings.Join(roles, ", ")
		for _, stmt := range []string{"DROP OWNED BY " + list, "DROP ROLE " + list} {
			if _, err := admin.Exec(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	return roles
}

// wantDenied runs sql as conn and requires PostgreSQL to refuse it for lack of privilege.
func wantDenied(t *testing.T, ctx context.Context, conn *pgx.Conn, who, sql string) {
	t.Helper()
	_, err := conn.Exec(ctx, sql)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s may run %q (%v); want permission denied (42501)", who, sql, err)
	}
}

func TestADispatcherAndAProducerWorkWithLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	dsn := testenv.EmptyDatabase(t)
	u, err := url.Parse(dsn)
	must(t, err)
	dbName := strings.TrimPrefix(u.Path, "/")
	admin := testenv.Connect(t, dsn) // the owner: a superuser in tests, the schema's owner in production

	// The owner migrates and owns everything; a business table sits beside the outbox.
	must(t, migrations.Up(ctx, dsn, table.Default))
	_, err = admin.Exec(ctx, `CREATE TABLE public.customers (id int, card_number text)`)
	must(t, err)
	roles := createRoles(t, ctx, admin, "outboxd_dispatcher", "outboxd_producer")
	dispatcher, prod := roles[0], roles[1]
	_, err = admin.Exec(ctx, strings.NewReplacer("%[1]s", dispatcher, "%[2]s", prod, "%[3]s", dbName).Replace(leastPrivilegeGrants))
	must(t, err)

	// A real outboxd runs as the dispatcher role: pipelines, listener, janitor (reclaim
	// and retention), samplers and the admin API.
	nats := testenv.NewNATS(t)
	const token = "least-privilege-admin-token"
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + withUser(t, dsn, dispatcher),
		"OUTBOXD_REPLICA_ID=least-privilege",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
		"OUTBOXD_HTTP__ADMIN_TOKEN=" + token,
		"OUTBOXD_JANITOR__INTERVAL=100ms",
		"OUTBOXD_JANITOR__RETENTION=1s",
		"OUTBOXD_JANITOR__STATS_INTERVAL=100ms",
		"OUTBOXD_DRIVERS__BUS__TYPE=nats", "OUTBOXD_DRIVERS__BUS__URL=" + nats.URL(),
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_STREAMS__ORDERS__TOPIC_PREFIX=orders.",
		"OUTBOXD_STREAMS__ORDERS__POLL_INTERVAL=50ms",
	}
	runCtx, stop := context.WithCancel(ctx)
	var logs testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, env{args: []string{"run"}, environ: environ, stdout: &logs, stderr: &logs})
	}()
	t.Cleanup(func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("outboxd run as %s exited %d:\n%s", dispatcher, code, logs.String())
		}
	})

	// The producer role writes through every client entry point, and with plain SQL.
	producerPool := testenv.Connect(t, withUser(t, dsn, prod))
	w, err := producer.New(table.Default)
	must(t, err)
	tx, err := producerPool.Begin(ctx)
	must(t, err)
	_, err = w.Enqueue(ctx, tx, producer.Message{Stream: "orders", Topic: "created", Payload: []byte("1")})
	must(t, err)
	must(t, w.EnqueueBatch(ctx, tx, []producer.Message{
		{Stream: "orders", Topic: "created", Payload: []byte("2")},
		{Stream: "orders", Topic: "bad subject", Payload: []byte("3")}, // fails for good: a write-back to failed
	}))
	_, err = tx.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'created', '4')`)
	must(t, err)
	must(t, tx.Commit(ctx))
	db, err := sql.Open("pgx", withUser(t, dsn, prod))
	must(t, err)
	t.Cleanup(func() { _ = db.Close() })
	stx, err := db.BeginTx(ctx, nil)
	must(t, err)
	_, err = w.EnqueueSQL(ctx, stx, producer.Message{Stream: "orders", Topic: "created", Payload: []byte("5")})
	must(t, err)
	must(t, w.EnqueueBatchSQL(ctx, stx, []producer.Message{{Stream: "orders", Topic: "created", Payload: []byte("6")}}))
	must(t, stx.Commit())

	count := func(where string) int {
		var n int
		must(t, admin.QueryRow(ctx, `SELECT count(*) FROM outbox.messages WHERE `+where).Scan(&n))
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen within 60s\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("delivery and the failure's write-back", func() bool { return count("status = 'delivered'")+count("status = 'failed'") == 6 })
	// Retention deletes the delivered rows.
	waitFor("retention", func() bool { return count("true") == 1 })

	// Requeue through the admin API: the table's requeue function, run as the dispatcher.
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+adminAddr(t, &logs)+"/api/v1/messages/requeue",
		strings.NewReader(`{"stream": "orders", "all": true}`))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"requeued": 1`) {
		t.Fatalf("requeue as %s: %d %s", dispatcher, res.StatusCode, body)
	}
	for _, bad := range []string{"permission denied", "42501"} {
		if strings.Contains(logs.String(), bad) {
			t.Fatalf("outboxd as %s met %q:\n%s", dispatcher, bad, logs.String())
		}
	}

	// Replay through the admin API as the dispatcher: the least-privilege janitor left a
	// purge horizon, which refuses a replay reaching back to it; a replay that would
	// copy needs grants this role lacks, and the answer says where to look.
	replay := func(body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+adminAddr(t, &logs)+"/api/v1/messages/replay", strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		must(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := replay(`{"stream": "orders", "dry_run": true}`); code != http.StatusConflict || !strings.Contains(body, "were purged") {
		t.Errorf("a replay into the purged range as %s: %d %s; want 409 naming the purge", dispatcher, code, body)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if code, body := replay(`{"stream": "orders", "since": "` + now + `"}`); code != http.StatusInternalServerError ||
		!strings.Contains(body, "docs/security.md") {
		t.Errorf("a replay as %s: %d %s; want 500 pointing at docs/security.md", dispatcher, code, body)
	}

	// What the dispatcher role may not do.
	asDispatcher := testenv.Connect(t, withUser(t, dsn, dispatcher))
	for _, stmt := range []string{
		`CREATE TABLE outbox.extra (i int)`,
		`CREATE TABLE public.extra (i int)`,
		`CREATE SCHEMA extra`,
		`DROP TABLE outbox.messages`,
		`ALTER TABLE outbox.messages ADD COLUMN extra int`,
		`TRUNCATE outbox.messages`,
		`INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 't', 'x')`,
		`UPDATE outbox.messages_schema_migrations SET dirty = true`,
		`SELECT card_number FROM public.customers`,
		`SELECT * FROM outbox.messages_stats`,
		`INSERT INTO outbox.messages_replays (stream, last_id, cursor_id, total) VALUES ('orders', 1, 0, 1)`,
		`DELETE FROM outbox.messages_purged`,
	} {
		wantDenied(t, ctx, asDispatcher, dispatcher, stmt)
	}
	// Migrations are the owner's: the dispatcher role can neither open the migrator
	// (it creates the schema if missing) nor revert them.
	mg, err := migrations.Open(ctx, withUser(t, dsn, dispatcher), table.Default)
	if err == nil {
		err = mg.Down(0)
		_ = mg.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "permission denied") && !strings.Contains(err.Error(), "must be owner") {
		t.Errorf("migrations as %s: %v; want permission denied", dispatcher, err)
	}
	if n := count("true"); n != 1 {
		t.Fatalf("the table holds %d rows after the dispatcher role's attempts, want 1", n)
	}

	// What the producer role may not do.
	asProducer := producerPool
	for _, stmt := range []string{
		`SELECT payload FROM outbox.messages`,
		`SELECT stream FROM outbox.messages`,
		`UPDATE outbox.messages SET status = 'pending'`,
		`DELETE FROM outbox.messages`,
		`SELECT outbox.messages_requeue_failed('orders')`,
		`SELECT * FROM outbox.messages_replay_start('orders', now())`,
		`SELECT * FROM outbox.messages_purged`,
		`SELECT * FROM outbox.messages_stats`,
		`SELECT card_number FROM public.customers`,
		`CREATE TABLE outbox.extra (i int)`,
		// The dispatcher's columns are not the producer's to write.
		`INSERT INTO outbox.messages (stream, topic, payload, created_at) VALUES ('orders', 't', 'x', '-infinity')`,
		`INSERT INTO outbox.messages (stream, topic, payload, status, published_at) VALUES ('orders', 't', 'x', 'delivered', now())`,
		`INSERT INTO outbox.messages (stream, topic, payload, attempts) VALUES ('orders', 't', 'x', 2147483647)`,
	} {
		wantDenied(t, ctx, asProducer, prod, stmt)
	}
}
