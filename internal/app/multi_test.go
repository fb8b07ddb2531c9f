package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/chaos"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/router/postgres"
	"github.com/outboxd/outboxd/table"
)

// multiWorld is three outbox databases, the last reached by outboxd only through a
// proxy that can make it look stopped, and one inbox database that a postgres driver
// publishes every outbox's messages into (topic "<outbox>.t"), where they are counted.
type multiWorld struct {
	ctx     context.Context
	names   []string
	direct  []*pgxpool.Pool // producers' connections, never through the proxy
	inbox   *pgxpool.Pool
	proxy   *chaos.Proxy
	addr    string // the admin endpoints
	written []atomic.Int64
}

func newMultiWorld(t *testing.T) (*multiWorld, *config.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	w := &multiWorld{ctx: ctx, names: []string{"orders", "billing", "stopped"}, written: make([]atomic.Int64, 3)}
	var urls []string
	for range w.names {
		dsn := testenv.EmptyDatabase(t)
		if err := migrations.Plain.Up(ctx, dsn, table.Default); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		w.direct = append(w.direct, pool)
		urls = append(urls, dsn)
	}
	u, err := url.Parse(urls[2])
	if err != nil {
		t.Fatal(err)
	}
	if w.proxy, err = chaos.Listen(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.proxy.Close() })
	u.Host = w.proxy.Addr()
	urls[2] = u.String()

	inboxDSN := testenv.EmptyDatabase(t)
	if w.inbox, err = pgxpool.New(ctx, inboxDSN); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.inbox.Close)
	if _, err := w.inbox.Exec(ctx, postgres.InboxSQL(table.Name{Schema: "public", Table: "outboxd_inbox"})); err != nil {
		t.Fatalf("create the inbox: %v", err)
	}
	w.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))

	var b strings.Builder
	fmt.Fprintf(&b, "http: {addr: %q}\nlog: {level: warn}\njanitor: {retention: 0s, stats_interval: 200ms}\n", w.addr)
	fmt.Fprintf(&b, "drivers:\n  inbox: {type: postgres, url: %q, max_conns: 4}\noutboxes:\n", inboxDSN)
	for i, name := range w.names {
		fmt.Fprintf(&b, "  - name: %s\n    database_url: %q\n    database: {user_timeout: 3s, keepalive_idle: 1s, keepalive_interval: 1s, keepalive_count: 2}\n", name, urls[i])
		fmt.Fprintf(&b, "    streams:\n      events: {driver: inbox, topic_prefix: %s., poll_interval: 100ms, flow: false}\n", name)
	}
	path := filepath.Join(t.TempDir(), "outboxd.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil, drivers.All())
	if err != nil {
		t.Fatal(err)
	}
	return w, cfg
}

// produce inserts one message into outbox i, its payload the database's clock, so the
// inbox can tell how long it took.
func (w *multiWorld) produce(t *testing.T, i int) {
	_, err := w.direct[i].Exec(w.ctx, `INSERT INTO outbox.messages (stream, topic, payload)
		VALUES ('events', 't', convert_to(clock_timestamp()::text, 'UTF8'))`)
	if err != nil {
		t.Errorf("produce into %s: %v", w.names[i], err)
		return
	}
	w.written[i].Add(1)
}

// producers insert into every outbox every few milliseconds until stop is closed.
func (w *multiWorld) producers(t *testing.T, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range w.names {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					w.produce(t, i)
				}
			}
		})
	}
	return &wg
}

// arrived counts the inbox's messages of outbox name, all of them, and the delivery
// latencies (inbox arrival minus insert, one server's clock) of those sent in
// [from, to) (to zero: no end): p50 and max in ms, and how many.
func (w *multiWorld) arrived(t *testing.T, name string, from, to time.Time) (n int64, p50, pmax float64, in int64) {
	t.Helper()
	if to.IsZero() {
		to = time.Now().Add(time.Hour)
	}
	err := w.inbox.QueryRow(w.ctx, `
		SELECT count(*),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY lat) FILTER (WHERE sent >= $2 AND sent < $3), 0),
		       coalesce(max(lat) FILTER (WHERE sent >= $2 AND sent < $3), 0),
		       count(*) FILTER (WHERE sent >= $2 AND sent < $3)
		  FROM (SELECT convert_from(payload, 'UTF8')::timestamptz AS sent,
		               extract(epoch FROM received_at - convert_from(payload, 'UTF8')::timestamptz) * 1000 AS lat
		          FROM public.outboxd_inbox WHERE topic = $1) x`, name+".t", from, to).Scan(&n, &p50, &pmax, &in)
	if err != nil {
		t.Fatalf("count the inbox: %v", err)
	}
	return n, p50, pmax, in
}

func (w *multiWorld) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(w.ctx, http.MethodGet, "http://"+w.addr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAStoppedDatabaseStallsOnlyItsOwnOutbox runs two replicas over three outboxes with
// producers on all three, the third's database cut at start and stalled mid-run, and
// counts every message of each outbox at the inbox.
func TestAStoppedDatabaseStallsOnlyItsOwnOutbox(t *testing.T) {
	w, cfg := newMultiWorld(t)
	const stopped = 2

	// The third database is unreachable from the start: the others must not wait for it.
	w.proxy.Cut()
	// Two replicas of the same three outboxes; the second without admin endpoints.
	second := *cfg
	second.ReplicaID, second.HTTP.Addr = "second", ""
	runCtx, stopRun := context.WithCancel(w.ctx)
	ran := make(chan error, 2)
	for _, c := range []*config.Config{cfg, &second} {
		go func() { ran <- Run(runCtx, c, RunOptions{Version: "test", Log: io.Discard}) }()
	}
	t.Cleanup(func() {
		stopRun()
		for range 2 {
			select {
			case err := <-ran:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not stop")
			}
		}
	})

	for i := range w.names {
		w.produce(t, i)
	}
	for _, i := range []int{0, 1} {
		eventually(t, 20*time.Second, w.names[i]+" delivers while another outbox's database is down at start", func() bool {
			n, _, _, _ := w.arrived(t, w.names[i], time.Time{}, time.Time{})
			return n == 1
		})
	}
	status, body := w.get(t, "/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"stopped.database"`) || !strings.Contains(body, `"orders.listener"`) {
		t.Errorf("/readyz = %d %s; want 503 naming stopped.database, and the others' checks", status, body)
	}
	if status, body := w.get(t, "/readyz?outbox=orders"); status != http.StatusOK {
		t.Errorf("/readyz?outbox=orders = %d %s; want 200: its own database is up", status, body)
	}
	w.proxy.Restore()
	eventually(t, 30*time.Second, "the outbox whose database came up delivers its backlog", func() bool {
		n, _, _, _ := w.arrived(t, w.names[stopped], time.Time{}, time.Time{})
		return n == 1
	})

	// Producers on all three; measure the two healthy outboxes' latency before and
	// while the third database is stalled mid-run.
	stop := make(chan struct{})
	prod := w.producers(t, stop)
	time.Sleep(500 * time.Millisecond)
	before := time.Now()
	time.Sleep(3 * time.Second)
	w.proxy.Stall()
	during := time.Now()
	time.Sleep(4 * time.Second)
	for _, i := range []int{0, 1} {
		_, p50Before, maxBefore, nBefore := w.arrived(t, w.names[i], before, during)
		_, p50During, maxDuring, nDuring := w.arrived(t, w.names[i], during, during.Add(3500*time.Millisecond))
		t.Logf("%s: latency before p50 %.1fms max %.1fms (%d messages); while %s is stalled p50 %.1fms max %.1fms (%d messages)",
			w.names[i], p50Before, maxBefore, nBefore, w.names[stopped], p50During, maxDuring, nDuring)
		if nDuring < nBefore/2 {
			t.Errorf("%s delivered %d messages sent while %s was stalled, %d in as long before", w.names[i], nDuring, w.names[stopped], nBefore)
		}
		if p50During > 2*p50Before+50 || maxDuring > max(3*maxBefore, 500) {
			t.Errorf("%s slowed down while %s was stalled: p50 %.1fms → %.1fms, max %.1fms → %.1fms", w.names[i], w.names[stopped],
				p50Before, p50During, maxBefore, maxDuring)
		}
	}
	// The stall holds: nothing the stopped outbox's producers wrote after it began arrives.
	if _, _, _, n := w.arrived(t, w.names[stopped], during.Add(time.Second), time.Time{}); n != 0 {
		t.Errorf("%s delivered %d messages while its database was stalled; the fault did not take", w.names[stopped], n)
	}
	w.proxy.Restore()
	time.Sleep(time.Second)
	close(stop)
	prod.Wait()

	for i, name := range w.names {
		want := w.written[i].Load()
		eventually(t, 60*time.Second, fmt.Sprintf("every message of %s (%d) reaches the inbox", name, want), func() bool {
			n, _, _, _ := w.arrived(t, name, time.Time{}, time.Time{})
			return n == want
		})
		var left int64
		if err := w.direct[i].QueryRow(w.ctx, `SELECT count(*) FROM outbox.messages`).Scan(&left); err != nil || left != 0 {
			t.Errorf("%s: %d rows left in the outbox (%v), want none (retention 0 deletes on acknowledgement)", name, left, err)
		}
	}

	// One admin API over all three, and metrics labelled by outbox.
	_, metrics := w.get(t, "/metrics")
	for _, name := range w.names {
		series := fmt.Sprintf(`outboxd_messages_published_total{outbox=%q,stream="events"} `, name)
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics has no %s", series)
		}
	}
	status, body = w.get(t, "/api/v1/stats")
	var all struct {
		Outboxes []struct {
			Outbox  string `json:"outbox"`
			Table   string `json:"table"`
			Streams []struct {
				Stream string `json:"stream"`
			} `json:"streams"`
			Error string `json:"error"`
		} `json:"outboxes"`
	}
	if err := json.Unmarshal([]byte(body), &all); err != nil || status != http.StatusOK {
		t.Fatalf("/api/v1/stats = %d %s (%v)", status, body, err)
	}
	var got []string
	for _, o := range all.Outboxes {
		if o.Error != "" || len(o.Streams) != 1 {
			t.Errorf("stats of %s: %+v", o.Outbox, o)
		}
		got = append(got, o.Outbox)
	}
	if !slices.Equal(got, w.names) {
		t.Errorf("stats list outboxes %q, want %q", got, w.names)
	}
	if status, body := w.get(t, "/api/v1/messages?stream=events&status=failed"); status != http.StatusBadRequest ||
		!strings.Contains(body, "configured in several outboxes (orders, billing, stopped)") {
		t.Errorf("listing a stream that three outboxes have, without outbox = %d %s; want 400 naming them", status, body)
	}
	if status, body := w.get(t, "/api/v1/messages?stream=events&status=failed&outbox=billing"); status != http.StatusOK {
		t.Errorf("listing with outbox=billing = %d %s; want 200", status, body)
	}
}
