package dispatch_test

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
)

// TestAnOrderedHotKeyDrainsWithoutWaitingForPolls: one key's backlog, claimed one run at
// a time because a key is claimed only from its head. Each finished batch must let the
// next claim go at once; polls, an hour apart here, cannot be what drains it, nor a
// flow (off here), whose polls every few milliseconds would hide a missing wake-up.
func TestAnOrderedHotKeyDrainsWithoutWaitingForPolls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := f.insertKeyed(t, "orders", "events", "hot", 2000)
	d, err := discard.New("d", discard.Options{}, nil)
	must(t, err)
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "d", Driver: d}})
	must(t, err)
	pub, err := rt.Publisher("orders")
	must(t, err)
	run(t, pipeline(t, f, dispatch.PipelineConfig{Ordered: true, BatchSize: 50, PollInterval: time.Hour, NoFlow: true}, pub, nil))
	waitFor(t, time.Minute, "the hot key's 2,000 messages delivered", func() bool { return f.statusOf(t, ids)["delivered"] == len(ids) })
	if sent, _ := d.Counts(); sent != int64(len(ids)) {
		t.Fatalf("%d messages published, want %d", sent, len(ids))
	}
}
