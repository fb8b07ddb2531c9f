package main

// The operations run through both edges, the admin API's handler and the CLI verb, on
// one table configured alike, must agree: the same JSON for the same request, and the
// same words for the same mistake (a 400 over HTTP is a usage error, exit 2, on the
// command line; a 409 exits 1).

import (
	"github.com/outboxd/outboxd/router/drivers"

	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/store"
)

const edgeToken = "edge-admin-token-0123456789abcdef"

// edges is an outbox table of the test's own, served by the admin handler and reached
// by the CLI verbs, both from the same configuration.
type edges struct {
	*inspectWorld
	srv *httptest.Server
}

func newEdges(t *testing.T) *edges {
	t.Helper()
	w := newInspectWorld(t, orderedEnv...)
	cfg, err := config.Load(config.FilePath("", w.environ), w.environ, drivers.All())
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(w.pg.Pool, w.pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	streams, drivers := ops.Describe(cfg)
	srv := httptest.NewServer(admin.New(admin.Options{Store: st, Streams: streams, Drivers: drivers, AdminToken: edgeToken}))
	t.Cleanup(srv.Close)
	return &edges{inspectWorld: w, srv: srv}
}

// http sends one request with the admin token and returns the status and the body.
func (e *edges) http(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+edgeToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// agree runs one request through both edges and fails unless both answer 200 with the
// same JSON (after normalize, when not nil). between, when not nil, runs after the
// request over HTTP, to undo what it changed. It returns the JSON.
func (e *edges) agree(t *testing.T, method, path, body string, cmd func(context.Context, env) error, args []string,
	between func(), normalize func(string) string) string {
	t.Helper()
	status, viaHTTP := e.http(t, method, path, body)
	if between != nil {
		between()
	}
	viaCLI, stderr, err := e.run(t, cmd, append(args, "--json")...)
	if status != http.StatusOK || err != nil {
		t.Fatalf("%s %s %s: %d %s\noutboxd %s: %v %s", method, path, body, status, viaHTTP, strings.Join(args, " "), err, stderr)
	}
	if normalize != nil {
		viaHTTP, viaCLI = normalize(viaHTTP), normalize(viaCLI)
	}
	if viaHTTP != viaCLI {
		t.Fatalf("the edges disagree:\n%s %s %s answered\n%s\noutboxd %s --json printed\n%s",
			method, path, body, viaHTTP, strings.Join(args, " "), viaCLI)
	}
	return viaHTTP
}

// refusal is one mistake made through both edges: its HTTP status, and the text the
// CLI adds after the operation's message (requeue's flag hint).
type refusal struct {
	name   string
	method string
	path   string
	body   string
	args   []string
	status int
	hint   string
}

// refuseAlike fails unless both edges refuse c with the same message: an HTTP error
// body {"error": M}, and from the CLI "verb: M" as a usage error for a 400, or M as
// another error (exit 1) for a 409.
func (e *edges) refuseAlike(t *testing.T, cmd func(context.Context, env) error, verb string, c refusal) {
	t.Helper()
	status, body := e.http(t, c.method, c.path, c.body)
	m := regexp.MustCompile(`^\{\s*"error": (".*")\s*\}\s*$`).FindStringSubmatch(body)
	if status != c.status || m == nil {
		t.Fatalf("%s %s %s: %d %s; want %d with an error", c.method, c.path, c.body, status, body, c.status)
	}
	msg, err := strconv.Unquote(m[1])
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.run(t, cmd, c.args...)
	var ue usageError
	want := msg
	if c.status == http.StatusBadRequest {
		want = verb + ": " + msg + c.hint
	}
	if err == nil || err.Error() != want || errors.As(err, &ue) != (c.status == http.StatusBadRequest) {
		t.Fatalf("the edges disagree on a mistake:\nHTTP %d: %s\noutboxd %s %s: %v (usage error: %v)",
			status, msg, verb, strings.Join(c.args, " "), err, errors.As(err, &ue))
	}
}

var pendingAge = regexp.MustCompile(`"oldest_pending_age_seconds": [0-9.e+-]+`)

func TestStatsAgreeOverHTTPAndTheCLI(t *testing.T) {
	t.Parallel()
	e := newEdges(t)
	stuck := e.insertKey(t, "orders", "order-42", 3)
	e.set(t, asFailed, stuck[0])
	e.insert(t, "ordrs", 2, false) // unserved: no configured stream names it
	// The oldest pending age moves on between the two calls; the rest must not.
	got := e.agree(t, "GET", "/api/v1/stats", "", statsCmd, nil, nil, func(s string) string {
		return pendingAge.ReplaceAllString(s, `"oldest_pending_age_seconds": AGE`)
	})
	for _, want := range []string{`"blocked_keys": 1`, `"blocked_messages": 2`, `"unserved": true`, `"auth": "none"`} {
		if !strings.Contains(got, want) {
			t.Errorf("stats lack %s:\n%s", want, got)
		}
	}
}

func TestMessagesAgreeOverHTTPAndTheCLI(t *testing.T) {
	t.Parallel()
	e := newEdges(t)
	e.insert(t, "payments", 3, true)
	e.insert(t, "orders", 2, false)
	first := e.agree(t, "GET", "/api/v1/messages?status=failed&limit=2", "", messagesCmd,
		[]string{"--status", "failed", "--limit", "2"}, nil, nil)
	cursor := regexp.MustCompile(`"next_cursor": "([^"]+)"`).FindStringSubmatch(first)
	if cursor == nil {
		t.Fatalf("a first page of 2 of 3 failed rows has no next_cursor:\n%s", first)
	}
	e.agree(t, "GET", "/api/v1/messages?status=failed&limit=2&cursor="+cursor[1], "", messagesCmd,
		[]string{"--status", "failed", "--limit", "2", "--cursor", cursor[1]}, nil, nil)
	e.agree(t, "GET", "/api/v1/messages?stream=orders&since=1h", "", messagesCmd, []string{"--stream", "orders", "--since", "1h"}, nil, nil)

	for _, c := range []refusal{
		{name: "an unknown status", path: "/api/v1/messages?status=stuck", args: []string{"--status", "stuck"}},
		{name: "a cursor not handed out", path: "/api/v1/messages?cursor=!!", args: []string{"--cursor", "!!"}},
		{name: "a limit over the page size", path: "/api/v1/messages?limit=5000", args: []string{"--limit", "5000"}},
		{name: "a time that is none", path: "/api/v1/messages?since=yesterday", args: []string{"--since", "yesterday"}},
		{name: "a window that ends before it starts", path: "/api/v1/messages?since=1h&until=2h", args: []string{"--since", "1h", "--until", "2h"}},
		{name: "a stream holding a NUL", path: "/api/v1/messages?stream=a%00b", args: []string{"--stream", "a\x00b"}},
		{name: "several mistakes at once", path: "/api/v1/messages?status=stuck&limit=0", args: []string{"--status", "stuck", "--limit", "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.method, c.status = "GET", http.StatusBadRequest
			e.refuseAlike(t, messagesCmd, "messages", c)
		})
	}
}

func TestRequeueAgreesOverHTTPAndTheCLI(t *testing.T) {
	t.Parallel()
	e := newEdges(t)
	e.insert(t, "payments", 5, true)
	failed := func() string { // which rows are failed, as one string
		var ids []string
		rows, err := e.pg.Pool.Query(e.ctx, `SELECT id FROM `+e.pg.Table.Qualified()+` WHERE status = 'failed' ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, strconv.FormatInt(id, 10))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(ids, ",")
	}
	refail := func() {
		if _, err := e.pg.Pool.Exec(e.ctx, `UPDATE `+e.pg.Table.Qualified()+` SET status = 'failed', attempts = 10, last_error = 'MESSAGE_TOO_LARGE'`); err != nil {
			t.Fatal(err)
		}
	}
	all := failed()
	ids := strings.Split(all, ",")

	// Each request runs over HTTP, then, on the same rows failed again, from the CLI:
	// the same answer and the same rows left failed.
	for _, c := range []struct {
		body string
		args []string
	}{
		{`{"stream": "payments", "limit": 2}`, []string{"--stream", "payments", "--limit", "2"}},
		{`{"stream": "payments", "all": true, "since": "1h"}`, []string{"--stream", "payments", "--all", "--since", "1h"}},
		{`{"ids": [` + ids[1] + `, ` + ids[3] + `]}`, []string{"--ids", ids[1] + "," + ids[3]}},
	} {
		status, viaHTTP := e.http(t, "POST", "/api/v1/messages/requeue", c.body)
		leftHTTP := failed()
		refail()
		viaCLI, _, err := e.run(t, requeueCmd, append(c.args, "--json")...)
		leftCLI := failed()
		refail()
		if status != http.StatusOK || err != nil || viaHTTP != viaCLI || leftHTTP != leftCLI {
			t.Fatalf("requeue %s: HTTP %d %s leaving [%s] failed; CLI %v %s leaving [%s] failed",
				c.body, status, viaHTTP, leftHTTP, err, viaCLI, leftCLI)
		}
	}
	if failed() != all {
		t.Fatal("refail did not restore the rows")
	}

	for _, c := range []refusal{
		{name: "a filter without a bound", body: `{"stream": "payments"}`, args: []string{"--stream", "payments"}},
		{name: "both bounds", body: `{"stream": "payments", "limit": 5, "all": true}`, args: []string{"--stream", "payments", "--limit", "5", "--all"}},
		{name: "ids and a filter", body: `{"ids": [1], "stream": "payments"}`, args: []string{"--ids", "1", "--stream", "payments"}},
		{name: "nothing named", body: `{}`, args: nil},
		{name: "a zero limit", body: `{"stream": "payments", "limit": 0}`, args: []string{"--stream", "payments", "--limit", "0"}},
		{name: "a time that is none", body: `{"stream": "payments", "all": true, "since": "last week"}`, args: []string{"--stream", "payments", "--all", "--since", "last week"}},
		{name: "a stream holding a NUL", body: `{"stream": "a\u0000b", "all": true}`, args: []string{"--stream", "a\x00b", "--all"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.method, c.path, c.status, c.hint = "POST", "/api/v1/messages/requeue", http.StatusBadRequest, requeueHint
			e.refuseAlike(t, requeueCmd, "requeue", c)
		})
	}
	if failed() != all {
		t.Fatal("a refused requeue changed rows")
	}
}

func TestSkipAgreesOverHTTPAndTheCLI(t *testing.T) {
	t.Parallel()
	e := newEdges(t)
	key := e.insertKey(t, "orders", "order-7", 2)
	e.set(t, asFailed, key[0])
	loose := e.insertKey(t, "orders", "", 3)
	e.set(t, asDelivered, loose[2])
	unskip := func(ids ...int64) { e.set(t, asFailed+`, skipped_at = NULL`, ids...) }

	e.agree(t, "POST", "/api/v1/messages/skip", `{"stream": "orders", "key": "order-7"}`, skipCmd,
		[]string{"--stream", "orders", "--key", "order-7"}, func() { unskip(key[0]) }, nil)
	ids := strconv.FormatInt(loose[0], 10) + ", " + strconv.FormatInt(loose[1], 10)
	e.agree(t, "POST", "/api/v1/messages/skip", `{"ids": [`+ids+`]}`, skipCmd,
		[]string{"--id", strings.ReplaceAll(ids, " ", "")}, func() { unskip(loose[0], loose[1]) }, nil)

	for _, c := range []refusal{
		{name: "a stream holding a NUL", body: `{"stream": "a\u0000b", "key": "k"}`, args: []string{"--stream", "a\x00b", "--key", "k"},
			status: http.StatusBadRequest},
		{name: "a key holding a NUL", body: `{"stream": "orders", "key": "k\u0000"}`, args: []string{"--stream", "orders", "--key", "k\x00"},
			status: http.StatusBadRequest},
		{name: "a delivered message", body: `{"ids": [` + strconv.FormatInt(loose[2], 10) + `]}`,
			args: []string{"--id", strconv.FormatInt(loose[2], 10)}, status: http.StatusConflict},
		{name: "a key with no head to skip", body: `{"stream": "orders", "key": "nobody"}`, args: []string{"--stream", "orders", "--key", "nobody"},
			status: http.StatusConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.method, c.path = "POST", "/api/v1/messages/skip"
			e.refuseAlike(t, skipCmd, "skip", c)
		})
	}
}

var replayID = regexp.MustCompile(`"id": [0-9]+`)

func TestReplayAgreesOverHTTPAndTheCLI(t *testing.T) {
	t.Parallel()
	e := newEdges(t)
	e.set(t, asDelivered, e.insertKey(t, "payments", "p-1", 3)...)
	e.set(t, asDelivered, e.insertKey(t, "payments", "p-2", 2)...)
	e.insertKey(t, "payments", "p-1", 1) // pending: never replayed
	copies := func() int { return e.count(t, `headers ? 'Outbox-Replay'`) }

	got := e.agree(t, "POST", "/api/v1/messages/replay", `{"stream": "payments", "key": "p-1", "dry_run": true}`, replayCmd,
		[]string{"--stream", "payments", "--key", "p-1", "--dry-run"}, nil, nil)
	if !strings.Contains(got, `"total": 3`) || copies() != 0 {
		t.Fatalf("a dry run answered %s and left %d copies; want a total of 3 and none", got, copies())
	}
	// Each replay runs to its end and copies what was delivered: the CLI's replay, a
	// new one, copies the same originals again (the HTTP one's copies are pending).
	got = e.agree(t, "POST", "/api/v1/messages/replay", `{"stream": "payments", "since": "1h"}`, replayCmd,
		[]string{"--stream", "payments", "--since", "1h"}, nil, func(s string) string { return replayID.ReplaceAllString(s, `"id": ID`) })
	if !strings.Contains(got, `"copied": 5`) || !strings.Contains(got, `"state": "done"`) || copies() != 10 {
		t.Fatalf("a replay answered %s and left %d copies; want 5 copied by each edge", got, copies())
	}
	e.agree(t, "POST", "/api/v1/messages/replay", `{"resume": 1}`, replayCmd, []string{"--resume", "1"}, nil, nil)

	for _, c := range []refusal{
		{name: "no stream", body: `{}`, args: nil, status: http.StatusBadRequest},
		{name: "a resume with a filter", body: `{"resume": 1, "stream": "payments"}`, args: []string{"--resume", "1", "--stream", "payments"},
			status: http.StatusBadRequest},
		{name: "both resume and cancel", body: `{"resume": 1, "cancel": 1}`, args: []string{"--resume", "1", "--cancel", "1"},
			status: http.StatusBadRequest},
		{name: "a window that ends before it starts", body: `{"stream": "payments", "since": "1h", "until": "2h"}`,
			args: []string{"--stream", "payments", "--since", "1h", "--until", "2h"}, status: http.StatusBadRequest},
		{name: "several mistakes at once", body: `{"stream": "a\u0000b", "since": "last week"}`,
			args: []string{"--stream", "a\x00b", "--since", "last week"}, status: http.StatusBadRequest},
		{name: "a replay that does not exist", body: `{"resume": 999}`, args: []string{"--resume", "999"}, status: http.StatusConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.method, c.path = "POST", "/api/v1/messages/replay"
			if c.status == http.StatusBadRequest {
				c.hint = replayHint
			}
			e.refuseAlike(t, replayCmd, "replay", c)
		})
	}
	if copies() != 10 {
		t.Fatal("a refused replay copied rows")
	}
}
