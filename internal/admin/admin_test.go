package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const token = "admin-token-0123456789abcdef"

type fixture struct {
	pg    *testenv.PG
	store *store.Store
	srv   *httptest.Server
	logs  *testenv.SyncBuffer
	ctx   context.Context
}

// setup serves the admin API on a table of the test's own; adjust changes the options
// before the handler is built.
func setup(t *testing.T, adjust func(*admin.Options)) *fixture {
	t.Helper()
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &fixture{pg: pg, store: st, logs: &testenv.SyncBuffer{}, ctx: ctx}
	opt := admin.Options{
		Store:   st,
		Streams: []ops.Stream{{Name: "orders", Driver: "bus"}, {Name: "payments", Driver: "bus"}},
		Logger:  slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if adjust != nil {
		adjust(&opt)
	}
	f.srv = httptest.NewServer(admin.New(opt))
	t.Cleanup(f.srv.Close)
	return f
}

func withToken(o *admin.Options) { o.AdminToken = token }

// insert writes n rows for stream and returns their ids.
func (f *fixture) insert(t *testing.T, stream string, n int) []int64 {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, payload)
		SELECT $1, 'topic', '\x00' FROM generate_series(1, $2) RETURNING id`, stream, n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// fail leaves rows as the dispatcher leaves a message it gave up on.
func (f *fixture) fail(t *testing.T, ids ...int64) {
	t.Helper()
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+`
		SET status = 'failed', attempts = 10, last_error = 'NOT_ENOUGH_REPLICAS' WHERE id = ANY ($1)`, ids); err != nil {
		t.Fatal(err)
	}
}

type rowState struct {
	Status    string
	Attempts  int
	LastError *string
}

func (f *fixture) state(t *testing.T, id int64) rowState {
	t.Helper()
	var r rowState
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT status, attempts, last_error FROM `+f.pg.Table.Qualified()+` WHERE id = $1`,
		id).Scan(&r.Status, &r.Attempts, &r.LastError); err != nil {
		t.Fatal(err)
	}
	return r
}

type response struct {
	Status int
	Header http.Header
	Body   string
}

func (f *fixture) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(f.ctx, method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: string(b)}
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.Body), v); err != nil {
		t.Fatalf("response %d is not the expected JSON (%v): %s", r.Status, err, r.Body)
	}
}

// errorText checks that r is a JSON error and returns its message.
func (r response) errorText(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	r.decode(t, &e)
	if e.Error == "" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d without a JSON error: %s", r.Status, r.Body)
	}
	return e.Error
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func TestRequeueIsRefusedWithoutTheRightTokenAndResetsFailedRowsWithIt(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	ids := f.insert(t, "orders", 4)
	f.fail(t, ids[0], ids[1], ids[2])
	body := fmt.Sprintf(`{"ids": [%d, %d, %d]}`, ids[0], ids[1], ids[3])

	for _, c := range []struct {
		name   string
		header []string
		want   string
	}{
		{"no Authorization header", nil, "needs the header Authorization: Bearer"},
		{"another scheme", []string{"Authorization", "Basic " + token}, "needs the header Authorization: Bearer"},
		{"an empty bearer token", bearer(""), "needs the header Authorization: Bearer"},
		{"a wrong token", bearer("admin-token-0123456789abcdeX"), "does not match http.admin_token"},
		{"a prefix of the token", bearer(token[:20]), "does not match http.admin_token"},
	} {
		res := f.do(t, "POST", "/api/v1/messages/requeue", body, c.header...)
		if res.Status != http.StatusUnauthorized || !strings.Contains(res.errorText(t), c.want) {
			t.Fatalf("%s: status %d %s; want 401 saying %q", c.name, res.Status, res.Body, c.want)
		}
		if res.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
	for _, id := range ids[:3] {
		if s := f.state(t, id); s.Status != "failed" || s.Attempts != 10 {
			t.Fatalf("a refused requeue changed row %d: %+v", id, s)
		}
	}

	res := f.do(t, "POST", "/api/v1/messages/requeue", body, bearer(token)...)
	var got ops.RequeueResult
	res.decode(t, &got)
	if res.Status != http.StatusOK || got.Requeued != 2 {
		t.Fatalf("requeue by ids: %d %s; want 200 with 2 requeued (the pending id is left alone)", res.Status, res.Body)
	}
	for _, id := range ids[:2] {
		if s := f.state(t, id); s.Status != "pending" || s.Attempts != 0 || s.LastError != nil {
			t.Fatalf("requeued row %d: %+v; want pending with attempts reset and no error", id, s)
		}
	}
	if s := f.state(t, ids[2]); s.Status != "failed" {
		t.Fatalf("a row not named was requeued: %+v", s)
	}

	res = f.do(t, "POST", "/api/v1/messages/requeue", `{"stream": "orders", "since": "1h", "limit": 5}`, bearer(token)...)
	res.decode(t, &got)
	if res.Status != http.StatusOK || got.Requeued != 1 {
		t.Fatalf("requeue by filter: %d %s; want 1 requeued", res.Status, res.Body)
	}
	if s := f.state(t, ids[2]); s.Status != "pending" || s.Attempts != 0 {
		t.Fatalf("row requeued by filter: %+v", s)
	}
	if strings.Contains(f.logs.String(), token) {
		t.Fatalf("the admin token reached the log:\n%s", f.logs)
	}
	if !strings.Contains(f.logs.String(), "requeued failed messages") {
		t.Fatalf("a requeue left no trace in the log:\n%s", f.logs)
	}
}

func TestRequeueIsDisabledWhenNoTokenIsConfigured(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.insert(t, "orders", 1)
	f.fail(t, ids...)
	for _, header := range [][]string{nil, bearer(token), bearer("")} {
		res := f.do(t, "POST", "/api/v1/messages/requeue", fmt.Sprintf(`{"ids": [%d]}`, ids[0]), header...)
		if res.Status != http.StatusForbidden || !strings.Contains(res.errorText(t), "no http.admin_token is configured") {
			t.Fatalf("status %d %s; want 403 saying mutation is disabled", res.Status, res.Body)
		}
	}
	if s := f.state(t, ids[0]); s.Status != "failed" {
		t.Fatalf("row requeued with mutation disabled: %+v", s)
	}
}

func TestMessagesArePagedByCursorEachRowExactlyOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.insert(t, "orders", 25)
	f.insert(t, "payments", 5)

	var seen []int64
	cursor, pages := "", 0
	for {
		path := "/api/v1/messages?stream=orders&limit=10"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		res := f.do(t, "GET", path, "")
		var page ops.MessagePage
		res.decode(t, &page)
		if res.Status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages+1, res.Status, res.Body)
		}
		pages++
		for _, m := range page.Messages {
			seen = append(seen, m.ID)
			if m.Stream != "orders" || m.Status != "pending" || m.PayloadBytes != 1 || m.PublishedAt != nil {
				t.Fatalf("listed %+v", m)
			}
		}
		if page.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		cursor = page.NextCursor
	}
	if pages != 3 || !slices.Equal(seen, ids) {
		t.Fatalf("%d pages listed %v; want 3 pages listing %v once each in order", pages, seen, ids)
	}
	if strings.Contains(f.do(t, "GET", "/api/v1/messages?stream=orders", "").Body, `"payload"`) {
		t.Fatal("a listing carries payloads")
	}

	// Exactly one page's worth: no empty page is promised after it.
	res := f.do(t, "GET", "/api/v1/messages?stream=payments&limit=5", "")
	var page ops.MessagePage
	res.decode(t, &page)
	if len(page.Messages) != 5 || page.NextCursor != "" {
		t.Fatalf("5 rows with limit 5: %d rows, next cursor %q", len(page.Messages), page.NextCursor)
	}
}

func TestMistakesAreRefusedWithAMessageNamingThem(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	auth := bearer(token)
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		header []string
		status int
		want   string
	}{
		{"a cursor this API did not make", "GET", "/api/v1/messages?cursor=not-a-cursor", "", auth, 400, `cursor "not-a-cursor" is not one this API handed out`},
		{"a cursor of base64 that is not an id", "GET", "/api/v1/messages?cursor=aGVsbG8", "", auth, 400, "is not one this API handed out"},
		{"a status outside the domain", "GET", "/api/v1/messages?status=stuck", "", auth, 400, `status: "stuck" is not one of pending, leased, delivered, failed, expired`},
		{"a time that is not a time", "GET", "/api/v1/messages?since=yesterday", "", auth, 400, `since: "yesterday" is neither an RFC 3339 time`},
		{"a window that ends before it starts", "GET", "/api/v1/messages?since=2024-05-02T00:00:00Z&until=2024-05-01T00:00:00Z", "", auth, 400, "until (2024-05-01T00:00:00Z) must be after since"},
		{"a limit above the maximum", "GET", "/api/v1/messages?limit=1001", "", auth, 400, `limit: want a whole number from 1 to 1000, got "1001"`},
		{"several mistakes at once", "GET", "/api/v1/messages?status=x&limit=0", "", auth, 400, `status: "x" is not one of`},
		{"an unknown query parameter", "GET", "/api/v1/messages?statsu=failed", "", auth, 400, "unknown query parameter statsu; this endpoint takes status, stream"},
		{"a repeated query parameter", "GET", "/api/v1/messages?status=failed&status=pending", "", auth, 400, "status is given 2 times"},
		{"a parameter on stats", "GET", "/api/v1/stats?verbose=1", "", auth, 400, "takes no query parameters"},
		{"a write to a read endpoint", "POST", "/api/v1/messages", "{}", nil, 405, "POST is not allowed on /api/v1/messages; use GET"},
		{"a read of the requeue endpoint", "GET", "/api/v1/messages/requeue", "", nil, 405, "use POST"},
		{"an unknown path", "GET", "/api/v2/stats", "", nil, 404, "no endpoint /api/v2/stats"},
		{"an unknown field in the body", "POST", "/api/v1/messages/requeue", `{"ids": [1], "force": true}`, auth, 400, `unknown field "force"`},
		{"ids of the wrong type", "POST", "/api/v1/messages/requeue", `{"ids": ["7"]}`, auth, 400, `field "ids" must be an integer, got a JSON string`},
		{"ids and a filter together", "POST", "/api/v1/messages/requeue", `{"ids": [1], "stream": "orders"}`, auth, 400, "either ids or a filter"},
		{"an empty id list", "POST", "/api/v1/messages/requeue", `{"ids": []}`, auth, 400, "ids: want 1 to 10000 ids, got 0"},
		{"a negative id", "POST", "/api/v1/messages/requeue", `{"ids": [-4]}`, auth, 400, "-4 is not a message id"},
		{"a filter without a stream", "POST", "/api/v1/messages/requeue", `{"limit": 10}`, auth, 400, "name the messages to requeue"},
		{"an empty object", "POST", "/api/v1/messages/requeue", `{}`, auth, 400, "name the messages to requeue"},
		{"a bad time in the body", "POST", "/api/v1/messages/requeue", `{"stream": "orders", "until": "soon"}`, auth, 400, `until: "soon" is neither`},
		{"no body", "POST", "/api/v1/messages/requeue", "", auth, 400, "the request body is empty"},
		{"a body that is not JSON", "POST", "/api/v1/messages/requeue", `ids=1`, auth, 400, "not valid JSON"},
		{"a body cut short", "POST", "/api/v1/messages/requeue", `{"ids": [1]`, auth, 400, "ends in the middle of its JSON object"},
		{"two JSON objects", "POST", "/api/v1/messages/requeue", `{"ids": [1]} {"ids": [2]}`, auth, 400, "unexpected data after the JSON object"},
		{"a form instead of JSON", "POST", "/api/v1/messages/requeue", `ids=1`, append(slices.Clone(auth), "Content-Type", "application/x-www-form-urlencoded"), 415, "must be JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := f.do(t, c.method, c.path, c.body, c.header...)
			if res.Status != c.status || !strings.Contains(res.errorText(t), c.want) {
				t.Fatalf("status %d, body %s; want %d saying %q", res.Status, res.Body, c.status, c.want)
			}
		})
	}
}

func TestAHugeRequestBodyIsRefusedWith413(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	var b strings.Builder
	b.WriteString(`{"ids": [1`)
	for b.Len() < 2<<20 {
		b.WriteString(", 1")
	}
	b.WriteString("]}")
	res := f.do(t, "POST", "/api/v1/messages/requeue", b.String(), bearer(token)...)
	if res.Status != http.StatusRequestEntityTooLarge || !strings.Contains(res.errorText(t), "larger than 1048576 bytes") {
		t.Fatalf("status %d, body %.200s; want 413", res.Status, res.Body)
	}
}

func TestStatsShowBacklogBreakersAndDriversButNeverASecret(t *testing.T) {
	t.Parallel()
	secrets := []string{"pg-pass-7f3a", "sasl-pass-91c2", "nats-token-55d0", "url-pass-3e8b", "url-token-c4d1", token}
	file := filepath.Join(t.TempDir(), "outboxd.yaml")
	yaml := `
database_url: postgres://app:pg-pass-7f3a@db.internal:5432/shop
drivers:
  bus:
    type: kafka
    brokers: [kafka-1:9092, kafka-2:9092]
    sasl: {mechanism: plain, username: outboxd, password: sasl-pass-91c2}
  js:
    type: jetstream
    url: nats://127.0.0.1:4222
    token: nats-token-55d0
  core:
    type: nats
    url: "nats://natsuser:url-pass-3e8b@nats-1:4222?password=url-pass-3e8b,tls://url-token-c4d1@nats-2:4222"
streams:
  orders: {driver: bus}
  payments: {driver: js}
  audit: {driver: core}
http:
  admin_token: ` + token + `
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file, nil, drivers.All())
	if err != nil {
		t.Fatal(err)
	}
	board := admin.NewBreakerBoard([]string{"audit", "orders", "payments"})
	board.Observe(events.BreakerChanged{Stream: "payments", From: events.BreakerClosed, To: events.BreakerOpen})
	f := setup(t, func(o *admin.Options) {
		o.Streams, o.Drivers = ops.Describe(cfg)
		o.AdminToken = cfg.HTTP.AdminToken
		o.Breakers = board.States
	})
	ids := f.insert(t, "orders", 3)
	f.fail(t, ids[0])
	f.insert(t, "payments", 2)

	res := f.do(t, "GET", "/api/v1/stats", "", bearer(token)...)
	if res.Status != http.StatusOK {
		t.Fatalf("stats: %d %s", res.Status, res.Body)
	}
	for _, s := range secrets {
		if strings.Contains(res.Body, s) || strings.Contains(f.logs.String(), s) {
			t.Fatalf("secret %q appears in stats or the log:\n%s\n%s", s, res.Body, f.logs)
		}
	}
	var st ops.Stats
	res.decode(t, &st)
	want := []ops.StreamStats{
		{Stream: "audit", Driver: "core", Breaker: "closed"},
		{Stream: "orders", Driver: "bus", Breaker: "closed", Pending: 2, Failed: 1},
		{Stream: "payments", Driver: "js", Breaker: "open", Pending: 2},
	}
	if len(st.Streams) != len(want) {
		t.Fatalf("streams %+v, want %+v", st.Streams, want)
	}
	for i, w := range want {
		g := st.Streams[i]
		if w.Pending > 0 && g.OldestPendingAgeSeconds <= 0 {
			t.Fatalf("%s: pending rows but no oldest pending age: %+v", w.Stream, g)
		}
		g.OldestPendingAgeSeconds = 0
		if g != w {
			t.Fatalf("stream %d: %+v, want %+v", i, g, w)
		}
	}
	wantDrivers := []ops.Driver{
		{Name: "bus", Type: "kafka", Addresses: []string{"kafka-1:9092", "kafka-2:9092"}, Auth: "sasl/plain"},
		{Name: "core", Type: "nats", Addresses: []string{"nats://nats-1:4222", "tls://nats-2:4222"}, TLS: true, Auth: "url credentials"},
		{Name: "js", Type: "jetstream", Addresses: []string{"nats://127.0.0.1:4222"}, Auth: "token"},
	}
	for i, w := range wantDrivers {
		g := st.Drivers[i]
		if g.Name != w.Name || g.Type != w.Type || !slices.Equal(g.Addresses, w.Addresses) || g.TLS != w.TLS || g.Auth != w.Auth {
			t.Fatalf("driver %d: %+v, want %+v", i, g, w)
		}
	}
	if st.Table != f.pg.Table.String() {
		t.Fatalf("table %q, want %q", st.Table, f.pg.Table)
	}
}

func TestReadinessFollowsDatabaseSchemaAndListenerButNotBrokers(t *testing.T) {
	t.Parallel()
	listenerUp := true
	var mu sync.Mutex
	listener := admin.Check{Name: "listener", Probe: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !listenerUp {
			return errors.New("notification listener disconnected; reconnecting")
		}
		return nil
	}}
	f := setup(t, func(o *admin.Options) {
		o.Ready = []admin.Check{listener}
		o.Breakers = func() map[string]string { return map[string]string{"orders": "open", "payments": "half-open"} }
	})
	ready := func(f *fixture) (admin.Readiness, int) {
		res := f.do(t, "GET", "/readyz", "")
		var r admin.Readiness
		res.decode(t, &r)
		return r, res.Status
	}

	r, status := ready(f)
	if status != http.StatusOK || !r.Ready || len(r.Checks) != 3 {
		t.Fatalf("with every broker down but the database, schema and listener fine: %d %+v; want ready", status, r)
	}

	mu.Lock()
	listenerUp = false
	mu.Unlock()
	r, status = ready(f)
	if status != http.StatusServiceUnavailable || r.Ready || r.Checks[2].OK || !strings.Contains(r.Checks[2].Error, "listener disconnected") ||
		!r.Checks[0].OK || !r.Checks[1].OK {
		t.Fatalf("listener down: %d %+v; want 503 naming the listener", status, r)
	}

	// A store on a table nobody migrated.
	unmigrated := setup(t, func(o *admin.Options) {
		st, err := store.New(f.pg.Pool, table.Name{Schema: "nowhere_" + strings.ReplaceAll(f.pg.Table.Schema, "t_", ""), Table: "messages"})
		if err != nil {
			t.Fatal(err)
		}
		o.Store = st
	})
	r, status = ready(unmigrated)
	if status != http.StatusServiceUnavailable || r.Checks[1].Name != "schema" || r.Checks[1].OK ||
		!strings.Contains(r.Checks[1].Error, "schema is at version 0, this build needs") {
		t.Fatalf("unmigrated table: %d %+v; want 503 naming the schema version", status, r)
	}
}

func TestLivenessMetricsAndUnknownPaths(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *admin.Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "outboxd_up 1\n")
		})
	})
	if res := f.do(t, "GET", "/healthz", ""); res.Status != http.StatusOK || !strings.Contains(res.Body, "alive") {
		t.Fatalf("healthz: %d %s", res.Status, res.Body)
	}
	if res := f.do(t, "GET", "/metrics", ""); res.Status != http.StatusOK || res.Body != "outboxd_up 1\n" {
		t.Fatalf("metrics: %d %s", res.Status, res.Body)
	}
	g := setup(t, nil)
	if res := g.do(t, "GET", "/metrics", ""); res.Status != http.StatusNotFound || !strings.Contains(res.errorText(t), "metrics are not served") {
		t.Fatalf("metrics without a handler: %d %s", res.Status, res.Body)
	}
}

func TestServeShutsDownGracefullyWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- admin.ServeListener(ctx, ln, admin.New(admin.Options{Store: st})) }()
	res, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", res.StatusCode)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if resp, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("still serving after shutdown")
	}
	if err := admin.Serve(context.Background(), "127.0.0.1:99999", nil); err == nil || !strings.Contains(err.Error(), "http.addr") {
		t.Fatalf("a bad address: %v; want an error naming http.addr", err)
	}
}
