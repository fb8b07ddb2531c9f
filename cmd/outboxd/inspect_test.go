package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// inspectWorld is an outbox table of the test's own and the environment that points
// the inspection commands at it.
type inspectWorld struct {
	pg      *testenv.PG
	environ []string
	ctx     context.Context
}

func newInspectWorld(t *testing.T, extraEnv ...string) *inspectWorld {
	t.Helper()
	pg := testenv.NewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	environ := append([]string{
		"OUTBOXD_DATABASE_URL=" + pg.DSN, "OUTBOXD_SCHEMA=" + pg.Table.Schema, "OUTBOXD_TABLE=" + pg.Table.Table,
	}, extraEnv...)
	return &inspectWorld{pg: pg, environ: environ, ctx: ctx}
}

// run calls one command function directly, as main's switch would.
func (w *inspectWorld) run(t *testing.T, cmd func(context.Context, env) error, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = cmd(w.ctx, env{args: args, environ: w.environ, stdout: &out, stderr: &errOut})
	return out.String(), errOut.String(), err
}

func (w *inspectWorld) mustRun(t *testing.T, cmd func(context.Context, env) error, args ...string) (stdout, stderr string) {
	t.Helper()
	out, errOut, err := w.run(t, cmd, args...)
	if err != nil {
		t.Fatalf("%s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out, errOut
}

// insert writes n rows of stream; failed ones as the dispatcher leaves them.
func (w *inspectWorld) insert(t *testing.T, stream string, n int, failed bool) {
	t.Helper()
	q := w.pg.Table.Qualified()
	var ids []int64
	rows, err := w.pg.Pool.Query(w.ctx, `INSERT INTO `+q+` (stream, topic, payload)
		SELECT $1, 'topic', '\x00' FROM generate_series(1, $2) RETURNING id`, stream, n)
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err == nil && failed {
		_, err = w.pg.Pool.Exec(w.ctx, `UPDATE `+q+`
			SET status = 'failed', attempts = 10, last_error = 'MESSAGE_TOO_LARGE: the broker refused ' || id
			WHERE id = ANY ($1)`, ids)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (w *inspectWorld) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := w.pg.Pool.QueryRow(w.ctx, `SELECT count(*) FROM `+w.pg.Table.Qualified()+` WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStatsShowsConfiguredStreamsOrElseEveryStreamWithABacklog(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	w.insert(t, "orders", 3, false)
	w.insert(t, "orders", 2, true)
	w.insert(t, "payments", 4, false)

	out, _ := w.mustRun(t, statsCmd)
	for _, want := range []string{"STREAM", "OLDEST PENDING", "orders", "payments"} {
		if !strings.Contains(out, want) {
			t.Fatalf("stats without configured streams lacks %q:\n%s", want, out)
		}
	}
	out, _ = w.mustRun(t, statsCmd, "--json")
	var st ops.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	if len(st.Streams) != 2 || st.Streams[0].Stream != "orders" || st.Streams[0].Pending != 3 || st.Streams[0].Failed != 2 ||
		st.Streams[1].Pending != 4 || st.Streams[0].OldestPendingAgeSeconds <= 0 || st.Table != w.pg.Table.String() {
		t.Fatalf("stats --json: %+v", st)
	}

	// Configured streams: those, with their driver, and no secret; then, marked
	// unserved, the streams with pending rows that none of them names.
	configured := newInspectWorld(t, "OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_DRIVERS__BUS__TYPE=nats",
		"OUTBOXD_DRIVERS__BUS__URL=nats://app:nats-pass-6a1f@nats-1:4222")
	configured.insert(t, "payments", 1, false)
	out, _ = configured.mustRun(t, statsCmd)
	if !strings.Contains(out, "UNSERVED") || !strings.Contains(out, "1 UNSERVED stream(s)") {
		t.Fatalf("stats does not mark the unconfigured stream with pending rows unserved:\n%s", out)
	}
	out, _ = configured.mustRun(t, statsCmd, "--json")
	if strings.Contains(out, "nats-pass-6a1f") {
		t.Fatalf("stats printed a secret:\n%s", out)
	}
	st = ops.Stats{}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Streams) != 2 || st.Streams[0].Stream != "orders" || st.Streams[0].Driver != "bus" || st.Streams[0].Breaker != "" ||
		st.Streams[0].Unserved || st.Streams[1].Stream != "payments" || !st.Streams[1].Unserved || st.Streams[1].Pending != 1 ||
		len(st.Drivers) != 1 || st.Drivers[0].Addresses[0] != "nats://nats-1:4222" {
		t.Fatalf("stats of configured streams: %+v", st)
	}
}

// A stream with more than store.ExactCountLimit pending rows is shown with its count
// estimated and marked so, in the JSON and in the table; the other stream stays exact.
func TestStatsMarksTheCountsItEstimated(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	// Rows of 400 bytes, so that the table outgrows the pages one estimate reads (a
	// sample of every page would be exact, and shown so).
	if _, err := w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, payload)
		SELECT 'orders', 'topic', convert_to(repeat('x', 400), 'UTF8') FROM generate_series(1, $1::int)`,
		store.ExactCountLimit+1000); err != nil {
		t.Fatal(err)
	}
	w.insert(t, "payments", 4, false)
	out, _ := w.mustRun(t, statsCmd, "--json")
	var st ops.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	if len(st.Streams) != 2 || !st.Streams[0].Estimated || st.Streams[0].Pending <= store.ExactCountLimit ||
		st.Streams[1].Estimated || st.Streams[1].Pending != 4 || !strings.Contains(out, `"estimated": true`) {
		t.Fatalf("stats --json of %d pending rows and 4: %s", store.ExactCountLimit+1000, out)
	}
	out, _ = w.mustRun(t, statsCmd)
	if !strings.Contains(out, "~") || !strings.Contains(out, "~ estimated from a sample of the table") {
		t.Fatalf("stats does not mark the estimated count:\n%s", out)
	}
}

func TestMessagesListsFiltersAndPagesLikeTheAPI(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	w.insert(t, "orders", 3, false)
	w.insert(t, "orders", 5, true)

	out, _ := w.mustRun(t, messagesCmd, "--status", "failed", "--since", "1h")
	if strings.Count(out, "MESSAGE_TOO_LARGE") != 5 || strings.Contains(out, "pending") {
		t.Fatalf("messages --status failed:\n%s", out)
	}

	var seen []int64
	args := []string{"--stream", "orders", "--limit", "3", "--json"}
	for page := 1; ; page++ {
		out, _ := w.mustRun(t, messagesCmd, args...)
		var p ops.MessagePage
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("page %d: %v\n%s", page, err, out)
		}
		for _, m := range p.Messages {
			seen = append(seen, m.ID)
		}
		if p.NextCursor == "" {
			if page != 3 {
				t.Fatalf("%d pages for 8 rows with --limit 3", page)
			}
			break
		}
		args = []string{"--stream", "orders", "--limit", "3", "--json", "--cursor", p.NextCursor}
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("ids out of order or repeated: %v", seen)
		}
	}
	if len(seen) != 8 {
		t.Fatalf("listed %d rows, want 8: %v", len(seen), seen)
	}

	_, errOut := w.mustRun(t, messagesCmd, "--limit", "2")
	if !strings.Contains(errOut, "more messages may match: add --cursor ") {
		t.Fatalf("a partial listing does not say how to continue: %q", errOut)
	}
	if out, _ := w.mustRun(t, messagesCmd, "--stream", "nobody"); !strings.Contains(out, "no messages match") {
		t.Fatalf("empty listing: %q", out)
	}
}

func TestRequeueByFilterRunsInChunksWithProgressAndResetsAttempts(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	w.insert(t, "orders", 2500, true)
	w.insert(t, "payments", 10, true)

	out, errOut := w.mustRun(t, requeueCmd, "--stream", "orders", "--limit", "1500")
	if !strings.Contains(errOut, "requeued 1000/1500\n") || !strings.Contains(errOut, "requeued 1500/1500\n") {
		t.Fatalf("no progress shown: %q", errOut)
	}
	if !strings.Contains(out, "requeued 1500 failed messages of stream orders") {
		t.Fatalf("summary: %q", out)
	}
	if n := w.count(t, `stream = 'orders' AND status = 'pending' AND attempts = 0 AND last_error IS NULL`); n != 1500 {
		t.Fatalf("%d orders rows back in line with attempts reset, want 1500", n)
	}

	out, errOut = w.mustRun(t, requeueCmd, "--stream", "orders", "--all", "--json")
	if errOut != "" || strings.TrimSpace(out) != `{
  "requeued": 1000
}` {
		t.Fatalf("requeue --all --json: stdout %q, stderr %q", out, errOut)
	}
	if n := w.count(t, `status = 'failed'`); n != 10 {
		t.Fatalf("%d rows still failed, want only the 10 of payments", n)
	}

	var ids []string
	rows, err := w.pg.Pool.Query(w.ctx, `SELECT id FROM `+w.pg.Table.Qualified()+` WHERE stream = 'payments' ORDER BY id LIMIT 3`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, fmt.Sprint(id))
	}
	rows.Close()
	out, _ = w.mustRun(t, requeueCmd, "--ids", strings.Join(append(ids, "999999999"), ","))
	if !strings.Contains(out, "requeued 3 of the 4 messages named") {
		t.Fatalf("requeue --ids: %q", out)
	}
	if n := w.count(t, `stream = 'payments' AND status = 'failed'`); n != 7 {
		t.Fatalf("%d payments rows still failed, want 7", n)
	}
}

func TestStatsMessagesAndRequeueRefuseMistakesWithAClearMessage(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	cases := []struct {
		name  string
		cmd   func(context.Context, env) error
		args  []string
		usage bool
		want  string
	}{
		{"requeue by filter without a bound", requeueCmd, []string{"--stream", "orders"}, true, "give one bound: limit N (at most N messages, oldest first) or all"},
		{"requeue with both a bound and --all", requeueCmd, []string{"--stream", "orders", "--limit", "5", "--all"}, true, "give one bound"},
		{"requeue with ids and a stream", requeueCmd, []string{"--ids", "1", "--stream", "orders"}, true, "either ids or a filter"},
		{"requeue ids with a window", requeueCmd, []string{"--ids", "1", "--since", "1h"}, true, "either ids or a filter"},
		{"requeue of ids that are not ids", requeueCmd, []string{"--ids", "1,two"}, true, `"two" is not a message id`},
		{"requeue of nothing", requeueCmd, nil, true, "name the messages to requeue"},
		{"requeue with a zero --limit", requeueCmd, []string{"--stream", "orders", "--limit", "0"}, true, "limit: want at least 1, got 0"},
		{"requeue with a bad time", requeueCmd, []string{"--stream", "orders", "--all", "--since", "last week"}, true, `since: "last week" is neither`},
		{"messages with an unknown status", messagesCmd, []string{"--status", "stuck"}, true, `status: "stuck" is not one of pending, leased, delivered, failed, expired`},
		{"messages with a bad cursor", messagesCmd, []string{"--cursor", "!!"}, true, `cursor "!!" is not one this API handed out`},
		{"messages with a limit over the page size", messagesCmd, []string{"--limit", "5000"}, true, "limit: want a whole number from 1 to 1000"},
		{"stats with an argument", statsCmd, []string{"orders"}, true, `stats: unexpected argument "orders"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := w.run(t, c.cmd, c.args...)
			var ue usageError
			if err == nil || errors.As(err, &ue) != c.usage || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want a usage error (%v) containing %q", err, c.usage, c.want)
			}
		})
	}

	unmigrated := &inspectWorld{ctx: w.ctx, environ: []string{"OUTBOXD_DATABASE_URL=" + w.pg.DSN, "OUTBOXD_SCHEMA=nowhere"}}
	if _, _, err := unmigrated.run(t, statsCmd); err == nil || !strings.Contains(err.Error(), "run `outboxd migrate up`") {
		t.Fatalf("stats on an unmigrated table: %v", err)
	}
	unreachable := &inspectWorld{ctx: w.ctx, environ: []string{"OUTBOXD_DATABASE_URL=postgres://nobody:db-pass-1b2c@127.0.0.1:1/none?connect_timeout=2"}}
	if _, _, err := unreachable.run(t, messagesCmd); err == nil || !strings.Contains(err.Error(), "connect to database") ||
		strings.Contains(err.Error(), "db-pass-1b2c") {
		t.Fatalf("messages against an unreachable database: %v", err)
	}
}
