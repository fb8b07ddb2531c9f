package console_test

import (
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/console"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// TestTheReplicasPageShowsWhoHoldsTheJanitorAndFlowLocks: the page names the serving
// replica's version and uptime, shows no session while none holds a lock, then the
// session holding the janitor lock (its application_name, hostile here, as text) and
// the one flowing a stream.
func TestTheReplicasPageShowsWhoHoldsTheJanitorAndFlowLocks(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	started := c.now()
	c.add(90 * time.Minute)
	box := console.Outbox{Name: "main", Store: st, Streams: []ops.Stream{{Name: "orders", Driver: "bus"}}}
	srv := httptest.NewServer(console.New(console.Options{Mode: config.UIReadonly, ReadToken: readToken, Now: c.now,
		Version: "v9.8.7", Started: started, Logger: slog.New(slog.DiscardHandler),
		Outboxes: func() []console.Outbox { return []console.Outbox{box} }}))
	t.Cleanup(srv.Close)
	f := &fixture{pg: pg, srv: srv, ctx: t.Context()}
	cl := f.client(t)
	cl.login(t, readToken)
	p := cl.get(t, "/ui/replicas")
	if p.status != http.StatusOK || !strings.Contains(p.body, "v9.8.7") || !strings.Contains(p.body, "up 1h30m0s") ||
		!strings.Contains(p.body, "No session holds a lock of this outbox now.") {
		t.Fatalf("the replicas page before any lock: %d %s", p.status, p.body)
	}

	u, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "<script>x</script>")
	u.RawQuery = q.Encode()
	conn := testenv.Connect(t, u.String())
	if _, err := conn.Exec(f.ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, 0x6f627864, pg.Table.AdvisoryLockKey()); err != nil {
		t.Fatal(err)
	}
	flow, err := st.TryFlow(f.ctx, "orders")
	if err != nil || flow == nil {
		t.Fatalf("flow lock: %v", err)
	}
	defer flow.Release(f.ctx)
	p = cl.get(t, "/ui/replicas")
	if !strings.Contains(p.body, "holds the janitor lock") || !strings.Contains(p.body, html.EscapeString("<script>x</script>")) ||
		strings.Contains(p.body, "<script>x") || !strings.Contains(p.body, "<td>orders</td>") {
		t.Errorf("the replicas page with the janitor and a flow lock held: %s", p.body)
	}
	if p := cl.get(t, "/ui/streams/table"); !strings.Contains(p.body, "<td>pid ") {
		t.Errorf("the streams table does not name the session flowing orders: %s", p.body)
	}
}
