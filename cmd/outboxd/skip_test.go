package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
)

// orderedEnv configures the stream orders as ordered, so stats shows its blocked keys.
var orderedEnv = []string{"OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_STREAMS__ORDERS__ORDERED=true",
	"OUTBOXD_DRIVERS__BUS__TYPE=nats", "OUTBOXD_DRIVERS__BUS__URL=nats://127.0.0.1:4222"}

// insertKey writes n rows of stream under key, in id order, and returns their ids.
func (w *inspectWorld) insertKey(t *testing.T, stream, key string, n int) []int64 {
	t.Helper()
	rows, err := w.pg.Pool.Query(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT $1, 'topic', $2, '\x00' FROM generate_series(1, $3) g ORDER BY g RETURNING id`, stream, key, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// set runs one UPDATE of the rows ids.
func (w *inspectWorld) set(t *testing.T, assignments string, ids ...int64) {
	t.Helper()
	if _, err := w.pg.Pool.Exec(w.ctx, `UPDATE `+w.pg.Table.Qualified()+` SET `+assignments+` WHERE id = ANY ($1)`, ids); err != nil {
		t.Fatal(err)
	}
}

const (
	asFailed    = `status = 'failed', attempts = 1, last_error = 'MESSAGE_TOO_LARGE'`
	asDelivered = `status = 'delivered', published_at = now()`
	asLeased    = `status = 'leased', lease_token = gen_random_uuid(), owner = 'elsewhere', lease_until = now() + interval '1 minute'`
)

func TestSkipByKeySkipsItsFailedHeadAndStatsShowTheKeyBlockedUntilThen(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t, orderedEnv...)
	stuck := w.insertKey(t, "orders", "order-42", 4)
	w.set(t, asFailed, stuck[0])

	out, _ := w.mustRun(t, statsCmd)
	if !strings.Contains(out, "BLOCKED KEYS") || !strings.Contains(out, "WAITING BEHIND") {
		t.Fatalf("stats of an ordered stream lacks the blocked-key columns:\n%s", out)
	}
	blocked := func() (int64, int64) {
		t.Helper()
		out, _ := w.mustRun(t, statsCmd, "--json")
		var st ops.Stats
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("stats --json: %v\n%s", err, out)
		}
		if len(st.Streams) != 1 || !st.Streams[0].Ordered || st.Streams[0].BlockedKeys == nil {
			t.Fatalf("stats --json of an ordered stream: %s", out)
		}
		return *st.Streams[0].BlockedKeys, *st.Streams[0].BlockedMessages
	}
	if k, m := blocked(); k != 1 || m != 3 {
		t.Fatalf("with a failed head: %d blocked keys, %d messages behind; want 1 and 3", k, m)
	}

	out, _ = w.mustRun(t, skipCmd, "--stream", "orders", "--key", "order-42")
	if want := fmt.Sprintf("skipped message %d, the head of key \"order-42\" of stream orders", stuck[0]); !strings.Contains(out, want) {
		t.Fatalf("skip by key printed %q; want %q", out, want)
	}
	if n := w.count(t, fmt.Sprintf(`id = %d AND status = 'failed' AND skipped_at IS NOT NULL AND last_error = 'MESSAGE_TOO_LARGE'`, stuck[0])); n != 1 {
		t.Fatal("the head is not failed and skipped with its last_error kept")
	}
	if n := w.count(t, `skipped_at IS NOT NULL`); n != 1 {
		t.Fatalf("%d rows skipped, want only the head", n)
	}
	if k, m := blocked(); k != 0 || m != 0 {
		t.Fatalf("after the skip: %d blocked keys, %d messages behind; want 0 and 0", k, m)
	}

	// A key whose head is being published, and one holding nothing: nothing to skip, said so.
	busy := w.insertKey(t, "orders", "in-flight", 2)
	w.set(t, asLeased, busy[0])
	for key, want := range map[string]string{
		"in-flight": `key "in-flight" of stream "orders" has no head to skip: its head is leased (being published right now`,
		"nobody":    "or nothing of the key is waiting",
	} {
		_, _, err := w.run(t, skipCmd, "--stream", "orders", "--key", key)
		var ue usageError
		if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
			t.Fatalf("skip of key %s: %v; want an error (not a usage error) saying %q", key, err, want)
		}
	}
	if n := w.count(t, `skipped_at IS NOT NULL`); n != 1 {
		t.Fatalf("%d rows skipped after two refused skips, want 1", n)
	}
	code, _, errOut := outboxd(t, w.environ, "skip", "--stream", "orders", "--key", "in-flight")
	if code != 1 || !strings.Contains(errOut, "has no head to skip") {
		t.Fatalf("outboxd skip with nothing to skip: exit %d, stderr %q; want exit 1 saying why", code, errOut)
	}
}

func TestSkipByIDSkipsTheFailedAndPendingMessagesNamedAndNothingElse(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	ids := w.insertKey(t, "orders", "order-7", 4)
	w.set(t, asFailed, ids[0])
	w.set(t, asDelivered, ids[2])

	out, _ := w.mustRun(t, skipCmd, "--id", fmt.Sprint(ids[0]), "--id", fmt.Sprintf("%d,%d", ids[1], ids[2]))
	if !strings.Contains(out, "skipped 2 of the 3 messages named") {
		t.Fatalf("skip by id printed %q; want 2 of 3 skipped", out)
	}
	skipped := w.count(t, fmt.Sprintf(`status = 'failed' AND skipped_at IS NOT NULL AND id IN (%d, %d)`, ids[0], ids[1]))
	if skipped != 2 || w.count(t, `skipped_at IS NOT NULL`) != 2 || w.count(t, `status = 'delivered'`) != 1 {
		t.Fatal("skip by id: want the failed and the pending message skipped, the delivered one and the last untouched")
	}

	_, _, err := w.run(t, skipCmd, "--id", fmt.Sprint(ids[2]))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("message %d was not skipped", ids[2])) {
		t.Fatalf("skip of a delivered message: %v; want an error naming it", err)
	}
	out, _ = w.mustRun(t, skipCmd, "--id", fmt.Sprint(ids[3]), "--json")
	if strings.TrimSpace(out) != "{\n  \"skipped\": 1\n}" {
		t.Fatalf("skip --json: %q", out)
	}
}

func TestSkipRefusesMistakesWithAClearMessage(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"skip of nothing", nil, "name what to skip: --id N [--id M …], or --stream S --key K"},
		{"skip with ids and a key", []string{"--id", "1", "--stream", "orders", "--key", "k"}, "either --id or --stream and --key, not both"},
		{"skip with an id and a stream", []string{"--id", "1", "--stream", "orders"}, "either --id or --stream and --key, not both"},
		{"skip of a stream without a key", []string{"--stream", "orders"}, "--stream needs --key"},
		{"skip of a key without a stream", []string{"--key", "order-42"}, "--key needs --stream"},
		{"skip of an id that is not one", []string{"--id", "seven"}, `"seven" is not a message id`},
		{"skip of a negative id", []string{"--id", "-3"}, `"-3" is not a message id`},
		{"skip with an argument", []string{"--id", "1", "now"}, `skip: unexpected argument "now"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := w.run(t, skipCmd, c.args...)
			var ue usageError
			if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want a usage error containing %q", err, c.want)
			}
		})
	}
	// An empty key is a key: with a stream, it is asked for, not refused.
	_, _, err := w.run(t, skipCmd, "--stream", "orders", "--key", "")
	if err == nil || !strings.Contains(err.Error(), `key "" of stream "orders" has no head to skip`) {
		t.Fatalf("skip of the empty key: %v", err)
	}
}

// TestRunShowsAnOrderedStreamsBlockedKeyAndASkipOverHTTPReleasesIt runs `outboxd run` on an
// ordered stream whose key order-42 starts with a failed message: the other key flows, the
// blocked-key gauges show the stuck one, and a skip through the admin API lets its three
// waiting messages through, after which the gauges read 0 again.
func TestRunShowsAnOrderedStreamsBlockedKeyAndASkipOverHTTPReleasesIt(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	const adminToken = "skip-token-0123456789abcdef"
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + dsn,
		"OUTBOXD_DRIVERS__SINK__TYPE=discard",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=sink",
		"OUTBOXD_STREAMS__ORDERS__ORDERED=true",
		"OUTBOXD_STREAMS__ORDERS__POLL_INTERVAL=50ms",
		"OUTBOXD_JANITOR__STATS_INTERVAL=100ms",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
		"OUTBOXD_HTTP__ADMIN_TOKEN=" + adminToken,
	}
	if code, _, errOut := outboxd(t, environ, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: exit %d: %s", code, errOut)
	}
	w := &inspectWorld{environ: environ, ctx: context.Background()}
	conn := testenv.Connect(t, dsn)
	var stuck, free []int64
	for key, ids := range map[string]*[]int64{"order-42": &stuck, "order-7": &free} {
		rows, err := conn.Query(w.ctx, `INSERT INTO outbox.messages (stream, topic, key, payload)
			SELECT 'orders', 'changed', $1, 'x' FROM generate_series(1, 4) g ORDER BY g RETURNING id`, key)
		if err == nil {
			*ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(w.ctx, `UPDATE outbox.messages SET status = 'failed', attempts = 1, last_error = 'MESSAGE_TOO_LARGE'
		WHERE id = $1`, stuck[0]); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, env{args: []string{"run"}, environ: environ, stdout: &logs, stderr: &logs}) }()
	delivered := func(ids []int64) int {
		var n int
		if err := conn.QueryRow(w.ctx, `SELECT count(*) FROM outbox.messages WHERE status = 'delivered' AND id = ANY ($1)`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\n%s", what, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	await("the admin listener", func() bool { return strings.Contains(logs.String(), "admin endpoints listening") })
	addr := adminAddr(t, &logs)
	metrics := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	gauges := func(keys, waiting int) func() bool {
		return func() bool {
			m := metrics()
			return strings.Contains(m, fmt.Sprintf("outboxd_ordered_blocked_keys{stream=\"orders\"} %d\n", keys)) &&
				strings.Contains(m, fmt.Sprintf("outboxd_ordered_blocked_messages{stream=\"orders\"} %d\n", waiting))
		}
	}
	await("the free key delivered", func() bool { return delivered(free) == len(free) })
	await("the gauges showing one blocked key with 3 messages behind it", gauges(1, 3))
	if n := delivered(stuck); n != 0 {
		t.Fatalf("%d messages of the blocked key delivered behind their failed head", n)
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/messages/skip", strings.NewReader(`{"stream": "orders", "key": "order-42"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`"id": %d`, stuck[0])) {
		t.Fatalf("skip over HTTP: %d %s", resp.StatusCode, body)
	}
	await("the skipped key's messages delivered", func() bool { return delivered(stuck[1:]) == len(stuck)-1 })
	await("the gauges back at zero", gauges(0, 0))

	cancel()
	awaitExit(t, done, &logs)
	if strings.Contains(logs.String(), adminToken) {
		t.Fatal("the admin token reached the logs")
	}
}
