package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxd/outboxd/internal/testenv"
)

// adminAddr reads the admin listener's address from run's start-up log.
func adminAddr(t *testing.T, logs *testenv.SyncBuffer) string {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "admin endpoints listening" {
			return l.Addr
		}
	}
	t.Fatalf("no admin listener in the logs:\n%s", logs.String())
	return ""
}

func TestRunMigratesDeliversAndStopsOnSignal(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	js := testenv.NewNATS(t)
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + strings.Replace(dsn, "postgres@", "postgres:db-secret-93b1@", 1),
		"OUTBOXD_DRIVERS__BUS__TYPE=nats",
		"OUTBOXD_DRIVERS__BUS__URL=" + js.URL(),
		"OUTBOXD_DRIVERS__BUS__TOKEN=nats-secret-7a2c",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus",
		"OUTBOXD_STREAMS__ORDERS__POLL_INTERVAL=50ms",
		"OUTBOXD_REPLICA_ID=run-test",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
	}
	// Without --migrate, a fresh database is refused with the fix named.
	code, _, errOut := outboxd(t, environ, "run")
	if code != 1 || !strings.Contains(errOut, "run `outboxd migrate up` or start with --migrate") {
		t.Fatalf("run on an unmigrated table: exit %d, %q", code, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env{args: []string{"run", "--migrate"}, environ: environ, stdout: &stderr, stderr: &stderr})
	}()
	conn := testenv.Connect(t, dsn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The table appears once run has migrated; then a row goes through.
		_, err := conn.Exec(context.Background(), `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'created', 'x')`)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox table never appeared: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	awaitDelivered(t, conn, "run-test", 1, deadline, &stderr)
	// The admin endpoints answer while it runs, without secrets.
	addr := adminAddr(t, &stderr)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/api/v1/stats": 200, "/metrics": 200, "/api/v1/messages/requeue": 403} {
		method := http.MethodGet
		if strings.HasSuffix(path, "requeue") {
			method = http.MethodPost // no admin token configured: mutation is off
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"ids":[1]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s; want %d", method, path, resp.StatusCode, body, want)
		}
		if strings.Contains(string(body), "nats-secret-7a2c") || strings.Contains(string(body), "db-secret-93b1") {
			t.Fatalf("%s leaked a secret: %s", path, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), `outboxd_messages_published_total{stream="orders"} 1`) {
			t.Fatalf("/metrics does not count the delivered message:\n%s", body)
		}
	}

	cancel() // SIGTERM
	awaitExit(t, done, &stderr)

	logs := stderr.String()
	for _, secret := range []string{"db-secret-93b1", "nats-secret-7a2c"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("a secret reached the logs:\n%s", logs)
		}
	}
	first, err := bufio.NewReader(strings.NewReader(logs)).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var line struct {
		Msg    string         `json:"msg"`
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Msg != "outboxd starting" || line.Config["replica_id"] != "run-test" {
		t.Fatalf("first log line is not the JSON start-up line with the configuration: %q (%v)", first, err)
	}
	if n := strings.Count(logs, "\n"); n > 20 {
		t.Fatalf("%d log lines for one message: outboxd must not log per message\n%s", n, logs)
	}
}

// awaitDelivered waits until want rows of the outbox are delivered by the replica owner,
// failing with run's logs at deadline.
func awaitDelivered(t *testing.T, conn *pgx.Conn, owner string, want int, deadline time.Time, logs *testenv.SyncBuffer) {
	t.Helper()
	for {
		var delivered int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM outbox.messages WHERE status = 'delivered' AND owner = $1`, owner).Scan(&delivered); err != nil {
			t.Fatal(err)
		}
		if delivered == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows delivered by outboxd run (replica %s)\n%s", delivered, want, owner, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitExit waits up to 30s for run, whose context was just cancelled (its SIGTERM), to
// return on done, and fails unless it exited 0.
func awaitExit(t *testing.T, done <-chan int, logs *testenv.SyncBuffer) {
	t.Helper()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s of its signal")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
