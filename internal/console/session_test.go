package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/console"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

// TestASessionEndsAtItsExpiryAndAtLogout: the cookie is only a key into the server's
// sessions, so an expired or logged-out session's cookie, sent again, admits nothing.
func TestASessionEndsAtItsExpiryAndAtLogout(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	f := &fixture{ctx: context.Background()}
	f.srv = httptest.NewServer(console.New(console.Options{Mode: config.UIOn, AdminToken: adminToken,
		Outboxes:   func() []console.Outbox { return nil },
		Now:        func() time.Time { return time.Unix(0, now.Load()) },
		SessionTTL: time.Hour}))
	t.Cleanup(f.srv.Close)

	c := f.client(t)
	c.login(t, adminToken)
	now.Add(int64(59 * time.Minute))
	if p := c.get(t, "/ui/streams"); p.status != http.StatusOK {
		t.Fatalf("a session 59 minutes into its hour: %d, want 200", p.status)
	}
	now.Add(int64(time.Minute))
	if p := c.get(t, "/ui/streams"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
		t.Fatalf("a session at the end of its hour: %d to %q, want 303 to /ui/login", p.status, p.header.Get("Location"))
	}

	csrf := c.login(t, adminToken)
	u, err := url.Parse(f.srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	kept := c.hc.Jar.Cookies(u)
	p := c.do(t, "POST", "/ui/logout", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || !strings.Contains(p.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("logout: %d, Set-Cookie %q; want 303 and the cookie cleared", p.status, p.header.Get("Set-Cookie"))
	}
	c.hc.Jar.SetCookies(u, kept) // the old cookie, replayed
	if p := c.get(t, "/ui/streams"); p.status != http.StatusSeeOther {
		t.Fatalf("the cookie of a logged-out session: %d, want 303 to the login page", p.status)
	}
}

// TestSeveralOutboxesAreShownApartAndMessagesOpenInTheirOwn: ids repeat across
// tables, so a message is opened in the outbox the link names.
func TestSeveralOutboxesAreShownApartAndMessagesOpenInTheirOwn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var boxes []console.Outbox
	var fixtures []*fixture
	for i, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		pg := testenv.NewPGLayout(t, layout)
		st, err := store.New(pg.Pool, pg.Table)
		if err != nil {
			t.Fatal(err)
		}
		name := []string{"shop", "billing"}[i]
		boxes = append(boxes, console.Outbox{Name: name, Store: st, Streams: []ops.Stream{{Name: name + "-events", Driver: "bus"}}})
		fixtures = append(fixtures, &fixture{pg: pg, ctx: ctx})
	}
	boxes = append(boxes, console.Outbox{Name: "later", Streams: []ops.Stream{{Name: "later-events", Driver: "bus"}}})
	shopID := fixtures[0].insert(t, "shop-events", "k", nil, []byte(`"from shop"`))
	billingID := fixtures[1].insert(t, "billing-events", "k", nil, []byte(`"from billing"`))
	if shopID != billingID {
		t.Fatalf("the test wants the same id in both tables, got %d and %d", shopID, billingID)
	}
	f := &fixture{ctx: ctx, logs: &testenv.SyncBuffer{}}
	f.srv = httptest.NewServer(console.New(console.Options{Mode: config.UIOn, AdminToken: adminToken,
		Outboxes: func() []console.Outbox { return boxes }, Logger: slog.New(slog.NewJSONHandler(f.logs, nil))}))
	t.Cleanup(f.srv.Close)
	c := f.client(t)
	c.login(t, adminToken)

	p := c.get(t, "/ui/streams")
	for _, want := range []string{"Outbox shop", "shop-events", "Outbox billing", "billing-events", "Outbox later", "is not connected yet"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the streams page has no %q:\n%s", want, p.body)
		}
	}
	for box, want := range map[string]string{"shop": "from shop", "billing": "from billing"} {
		p := c.get(t, "/ui/message?outbox="+box+"&id="+itoa(shopID))
		if p.status != http.StatusOK || !strings.Contains(p.body, want) {
			t.Errorf("message %d of outbox %s: %d, want its payload %q\n%s", shopID, box, p.status, want, p.body)
		}
	}
	if p := c.get(t, "/ui/message?id="+itoa(shopID)); p.status != http.StatusBadRequest || !strings.Contains(p.body, "name one with outbox") {
		t.Errorf("a message without its outbox among several: %d, want 400 asking for the outbox\n%s", p.status, p.body)
	}
	if p := c.get(t, "/ui/messages?stream=billing-events"); p.status != http.StatusOK || !strings.Contains(p.body, "/ui/message?outbox=billing&amp;id="+itoa(billingID)) {
		t.Errorf("the listing of a stream only one outbox configures: %d\n%s", p.status, p.body)
	}
}
