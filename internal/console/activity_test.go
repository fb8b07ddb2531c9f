package console_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/console"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/store"
)

// clock is a hand-moved clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time              { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration)         { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock                       { return &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)} }
func published(s string, n int) events.Event { return events.Iteration{Stream: s, Published: n} }

// TestActivityCountsRecentPublishesPerSlotAndOnlyForwardedDeadLetters: publishes land
// in the slot of their time, slots older than the window fall out, the rate is the last
// full minute's, and only forwarded dead letters count.
func TestActivityCountsRecentPublishesPerSlotAndOnlyForwardedDeadLetters(t *testing.T) {
	t.Parallel()
	c := newClock()
	a := console.NewActivity(c.now)
	a.Observe(published("orders", 600))
	c.add(10 * time.Second)
	a.Observe(published("orders", 5))
	a.Observe(published("orders", 7))
	a.Observe(published("payments", 1))
	for _, r := range []events.DeadLetterResult{events.DeadLetterForwardedOK, events.DeadLetterRetried, events.DeadLetterForwardedOK} {
		a.Observe(events.DeadLetterForwarded{Stream: "orders", Result: r})
	}
	got := a.Of("orders")
	if n := len(got.PerSlot); n != 30 || got.PerSlot[28] != 600 || got.PerSlot[29] != 12 || got.DeadLettered != 2 {
		t.Fatalf("orders: slots %v, dead-lettered %d; want 30 slots ending 600, 12 and 2 dead-lettered", got.PerSlot, got.DeadLettered)
	}
	if r := got.Rate(); r != 10 {
		t.Errorf("rate over the last full minute: %v, want 600/60 = 10", r)
	}
	c.add(5 * time.Minute)
	if got := a.Of("orders"); got.PerSlot[29] != 0 || got.PerSlot[0] != 0 || got.DeadLettered != 2 {
		t.Errorf("five minutes later: slots %v, dead-lettered %d; want no publishes left, 2 dead-lettered", got.PerSlot, got.DeadLettered)
	}
	if got := a.Of("nothing"); len(got.PerSlot) != 30 || got.Rate() != 0 {
		t.Errorf("a stream never seen: %+v", got)
	}
}

// TestTheStreamsPageDrawsThroughputAndDeadLettersFromTheActivity: with an Activity the
// page and its refreshed fragment show the dead-lettered count and a sparkline drawn
// by the server, no script; without one, neither column.
func TestTheStreamsPageDrawsThroughputAndDeadLettersFromTheActivity(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	st, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	a := console.NewActivity(c.now)
	a.Observe(published("orders", 42))
	a.Observe(events.DeadLetterForwarded{Stream: "orders", Result: events.DeadLetterForwardedOK})
	for _, act := range []*console.Activity{a, nil} {
		box := console.Outbox{Name: "main", Store: st, Streams: []ops.Stream{{Name: "orders", Driver: "bus"}}, Activity: act}
		srv := httptest.NewServer(console.New(console.Options{Mode: config.UIReadonly, ReadToken: readToken,
			Outboxes: func() []console.Outbox { return []console.Outbox{box} }, Logger: slog.New(slog.DiscardHandler)}))
		t.Cleanup(srv.Close)
		f := &fixture{pg: pg, srv: srv, ctx: t.Context()}
		cl := f.client(t)
		cl.login(t, readToken)
		for _, path := range []string{"/ui/streams", "/ui/streams/table"} {
			p := cl.get(t, path)
			hasSpark := strings.Contains(p.body, "<polyline") && strings.Contains(p.body, "Dead-lettered")
			switch {
			case p.status != http.StatusOK:
				t.Errorf("%s: %d", path, p.status)
			case act != nil && (!hasSpark || !strings.Contains(p.body, `<td class="num">1</td>`)):
				t.Errorf("%s with an activity: no sparkline or dead-lettered count 1:\n%s", path, p.body)
			case act == nil && hasSpark:
				t.Errorf("%s without an activity shows its columns", path)
			}
		}
	}
}
