package console_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/console"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

const (
	adminToken = "admin-token-0123456789"
	readToken  = "read-token-0123456789"
	hostile    = "<script>alert(1)</script>"
)

type fixture struct {
	pg   *testenv.PG
	ctx  context.Context
	srv  *httptest.Server
	logs *testenv.SyncBuffer
}

// setup serves a console in mode over a fresh table with the streams orders and
// (ordered) payments.
func setup(t *testing.T, mode string) *fixture {
	t.Helper()
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &fixture{pg: pg, ctx: ctx, logs: &testenv.SyncBuffer{}}
	box := console.Outbox{Name: "main", Store: st,
		Streams:  []ops.Stream{{Name: "orders", Driver: "bus"}, {Name: "payments", Driver: "bus", Ordered: true}},
		Breakers: func() map[string]string { return map[string]string{"orders": "open"} }}
	f.srv = httptest.NewServer(console.New(console.Options{
		Mode: mode, AdminToken: adminToken, ReadToken: readToken,
		Outboxes: func() []console.Outbox { return []console.Outbox{box} },
		Logger:   slog.New(slog.NewJSONHandler(f.logs, nil)),
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// client is a browser: a cookie jar, redirects not followed, every URL it was sent to
// recorded.
type client struct {
	f    *fixture
	hc   *http.Client
	urls []string
}

func (f *fixture) client(t *testing.T) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{f: f, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (c *client) do(t *testing.T, method, path string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.f.ctx, method, c.f.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	c.urls = append(c.urls, req.URL.String())
	res, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if loc := res.Header.Get("Location"); loc != "" {
		c.urls = append(c.urls, loc)
	}
	return page{res.StatusCode, res.Header, string(b)}
}

func (c *client) get(t *testing.T, path string) page { t.Helper(); return c.do(t, "GET", path, nil) }

// login logs in with tok and returns the CSRF token of the session's forms.
func (c *client) login(t *testing.T, tok string) string {
	t.Helper()
	p := c.do(t, "POST", "/ui/login", url.Values{"token": {tok}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/streams" {
		t.Fatalf("login: %d %s, want 303 to /ui/streams", p.status, p.body)
	}
	p = c.get(t, "/ui/streams")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("the streams page after login has no CSRF field: %d %s", p.status, p.body)
	}
	return m[1]
}

func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pg.Pool.Exec(f.ctx, strings.ReplaceAll(sql, "{{table}}", f.pg.Table.Qualified()), args...); err != nil {
		t.Fatal(err)
	}
}

// insert writes one message and returns its id.
func (f *fixture) insert(t *testing.T, stream, key string, headers map[string]string, payload []byte) int64 {
	t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	h, err := json.Marshal(headers)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := f.pg.Pool.QueryRow(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, headers, payload)
		VALUES ($1, 'topic', $2, $3::jsonb, $4) RETURNING id`, stream, key, string(h), payload).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (f *fixture) fail(t *testing.T, id int64, why string) {
	t.Helper()
	f.exec(t, `UPDATE {{table}} SET status = 'failed', attempts = 3, last_error = $2, published_at = NULL WHERE id = $1`, id, why)
}

func (f *fixture) status(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT status FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAPageWithoutASessionGoesToTheLoginPage(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	c := f.client(t)
	for _, path := range []string{"/ui/streams", "/ui/messages", "/ui/message?id=1"} {
		if p := c.get(t, path); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
			t.Errorf("GET %s without a session: %d to %q, want 303 to /ui/login", path, p.status, p.header.Get("Location"))
		}
	}
	if p := c.get(t, "/ui/streams/table"); p.status != http.StatusUnauthorized {
		t.Errorf("the refreshing fragment without a session: %d, want 401", p.status)
	}
	if p := c.do(t, "POST", "/ui/act", url.Values{"action": {"requeue"}, "id": {"1"}}); p.status != http.StatusUnauthorized {
		t.Errorf("an action without a session: %d, want 401", p.status)
	}
	if p := c.get(t, "/ui/login"); p.status != http.StatusOK || !strings.Contains(p.body, `method="post" action="/ui/login"`) {
		t.Errorf("the login page: %d %s, want 200 and a form posted to /ui/login", p.status, p.body)
	}
}

func TestAWrongTokenDoesNotLogIn(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	c := f.client(t)
	p := c.do(t, "POST", "/ui/login", url.Values{"token": {"not-the-token-0123456789"}})
	if p.status != http.StatusUnauthorized || p.header.Get("Set-Cookie") != "" {
		t.Fatalf("login with a wrong token: %d, Set-Cookie %q; want 401 and no cookie", p.status, p.header.Get("Set-Cookie"))
	}
	if !strings.Contains(f.logs.String(), "console login with a wrong token refused") {
		t.Errorf("a wrong token was not logged: %s", f.logs)
	}
}

// TestTheSessionCookieIsARandomIDWithTheStrictFlags: the cookie holds neither token,
// cannot be read by script or sent by another site, is scoped to /ui, and is Secure
// over TLS.
func TestTheSessionCookieIsARandomIDWithTheStrictFlags(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	c := f.client(t)
	p := c.do(t, "POST", "/ui/login", url.Values{"token": {adminToken}})
	ck := (&http.Response{Header: p.header}).Cookies()
	if len(ck) != 1 {
		t.Fatalf("login set %d cookies, want 1: %v", len(ck), p.header)
	}
	k := ck[0]
	if !k.HttpOnly || k.SameSite != http.SameSiteStrictMode || k.Path != "/ui" || k.Secure || len(k.Value) < 40 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui, not Secure over plain HTTP, a long random value", k)
	}
	if strings.Contains(k.Value, adminToken) || strings.Contains(p.header.Get("Set-Cookie"), adminToken) {
		t.Errorf("the session cookie holds the token: %q", p.header.Get("Set-Cookie"))
	}

	// Over TLS the cookie is Secure.
	h := console.New(console.Options{Mode: config.UIOn, AdminToken: adminToken,
		Outboxes: func() []console.Outbox { return nil }})
	req := httptest.NewRequest("POST", "https://console.test/ui/login", strings.NewReader("token="+adminToken))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.TLS = &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ck := rec.Result().Cookies(); len(ck) != 1 || !ck[0].Secure {
		t.Errorf("login over TLS: cookies %+v, want one Secure cookie", ck)
	}
}

func TestTheTokenIsNeverInAURLNorInAPage(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	id := f.insert(t, "orders", "k", nil, []byte(`{}`))
	f.fail(t, id, "broken")
	c := f.client(t)
	csrf := c.login(t, adminToken)
	var bodies []string
	for _, path := range []string{"/ui/streams", "/ui/streams/table", "/ui/messages?stream=orders&status=failed", "/ui/message?id=" + itoa(id)} {
		bodies = append(bodies, c.get(t, path).body)
	}
	bodies = append(bodies, c.do(t, "POST", "/ui/confirm", url.Values{"csrf": {csrf}, "action": {"requeue"}, "id": {itoa(id)}}).body)
	for _, u := range c.urls {
		if strings.Contains(u, adminToken) || strings.Contains(u, url.QueryEscape(adminToken)) {
			t.Errorf("the token is in a URL: %s", u)
		}
	}
	for _, b := range bodies {
		if strings.Contains(b, adminToken) {
			t.Errorf("the token is in a page: %s", b)
		}
	}
}

func TestHostileKeysHeadersPayloadsAndErrorsShowAsText(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	jsonID := f.insert(t, "orders", hostile, map[string]string{hostile: hostile}, []byte(`{"x":"`+hostile+`"}`))
	rawID := f.insert(t, "orders", hostile, nil, []byte(hostile+"\xff"))
	f.fail(t, jsonID, hostile)
	c := f.client(t)
	c.login(t, adminToken)
	escaped := html.EscapeString(hostile)
	for _, path := range []string{"/ui/message?id=" + itoa(jsonID), "/ui/messages?stream=orders", "/ui/messages?stream=" + url.QueryEscape(hostile)} {
		p := c.get(t, path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, p.status, p.body)
		}
		if strings.Contains(p.body, hostile) {
			t.Errorf("GET %s renders the hostile text unescaped:\n%s", path, p.body)
		}
		if !strings.Contains(p.body, escaped) && !strings.Contains(p.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s does not show the hostile text as text:\n%s", path, p.body)
		}
	}
	p := c.get(t, "/ui/message?id="+itoa(jsonID))
	if !strings.Contains(p.body, "JSON") || !strings.Contains(p.body, "\n  &#34;x&#34;: ") {
		t.Errorf("a JSON payload is not shown indented:\n%s", p.body)
	}
	p = c.get(t, "/ui/message?id="+itoa(rawID))
	if strings.Contains(p.body, hostile) || !strings.Contains(p.body, "3c 73 63 72 69 70 74 3e") {
		t.Errorf("a payload that is not JSON is not shown as hex:\n%s", p.body)
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q, want script-src 'self'", csp)
	}
}

func TestALargePayloadIsCutWithItsSizeShown(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	id := f.insert(t, "orders", "", nil, []byte(strings.Repeat("x", ops.MaxPayloadShown+100)))
	c := f.client(t)
	c.login(t, readToken)
	p := c.get(t, "/ui/message?id="+itoa(id))
	if want := itoa(int64(ops.MaxPayloadShown+100)) + " bytes, the first " + itoa(ops.MaxPayloadShown) + " shown"; !strings.Contains(p.body, want) {
		t.Errorf("a payload past the limit: page does not say %q", want)
	}
	if len(p.body) > 5*ops.MaxPayloadShown {
		t.Errorf("the page is %d bytes for a payload cut at %d", len(p.body), ops.MaxPayloadShown)
	}
}

func itoa[T int | int64](n T) string { return strconv.FormatInt(int64(n), 10) }

// TestEveryConsolePathTheDocsNameIsServed: a console path in the docs answers a logged-in
// browser with anything but 404.
func TestEveryConsolePathTheDocsNameIsServed(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	c := f.client(t)
	c.login(t, readToken)
	seen := 0
	for _, file := range []string{"../../docs/operations.md", "../../docs/configuration.md", "../../docs/security.md", "../../README.md"} {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range regexp.MustCompile("`(/ui/[a-z/]*)`").FindAllStringSubmatch(string(text), -1) {
			seen++
			if got := c.get(t, p[1]); got.status == http.StatusNotFound {
				t.Errorf("%s names %s, which the console does not serve", file, p[1])
			}
		}
	}
	if seen == 0 {
		t.Fatal("the docs name no console path")
	}
}

// TestATraceIDLinksToTheConfiguredViewer: a valid traceparent shows its trace id,
// linked when tracing.ui_url is set; a forged one shows no link.
func TestATraceIDLinksToTheConfiguredViewer(t *testing.T) {
	t.Parallel()
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f := &fixture{pg: pg, ctx: ctx}
	f.srv = httptest.NewServer(console.New(console.Options{Mode: config.UIReadonly, ReadToken: readToken,
		TraceURL: "https://jaeger.example/trace/{trace_id}",
		Outboxes: func() []console.Outbox { return []console.Outbox{{Name: "main", Store: st}} }}))
	t.Cleanup(f.srv.Close)
	good := f.insert(t, "orders", "", map[string]string{"traceparent": "00-" + trace + "-00f067aa0ba902b7-01"}, []byte(`{}`))
	forged := f.insert(t, "orders", "", map[string]string{"traceparent": `00-"><script>x</script>-00f067aa0ba902b7-01`}, []byte(`{}`))
	c := f.client(t)
	c.login(t, readToken)
	if p := c.get(t, "/ui/message?id="+itoa(good)); !strings.Contains(p.body, `<a href="https://jaeger.example/trace/`+trace+`" rel="noopener noreferrer">`+trace+`</a>`) {
		t.Errorf("a message with a traceparent does not link its trace:\n%s", p.body)
	}
	if p := c.get(t, "/ui/message?id="+itoa(forged)); strings.Contains(p.body, "jaeger.example") || strings.Contains(p.body, "<script>x") {
		t.Errorf("a forged traceparent was linked or rendered raw:\n%s", p.body)
	}
}
