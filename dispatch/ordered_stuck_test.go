package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/router"
)

// headRefusingDriver confirms everything it is sent, in order, except the ids in poison,
// which it refuses for good before sending (Check), as a broker refuses a message it can
// never take.
type headRefusingDriver struct {
	mu     sync.Mutex
	poison map[int64]bool
	order  []router.Message // confirmed, in the order confirmed
}

func (d *headRefusingDriver) Check(m *router.Message) error {
	if d.poison[m.ID] {
		return router.Permanent(errors.New("poison message"))
	}
	return nil
}

func (d *headRefusingDriver) Publish(_ context.Context, msgs []router.Message) []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.order = append(d.order, msgs...)
	return make([]error, len(msgs))
}

func (*headRefusingDriver) Close() error { return nil }

func (d *headRefusingDriver) confirmed(key string) []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []int64
	for _, m := range d.order {
		if string(m.Key) == key {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

func TestAPermanentlyFailingHeadHoldsItsKeyUntilSkippedWhileOtherKeysFlow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := f.insert(t, "orders", 70) // keys k0..k6, ten rows each, interleaved
	byKey := map[string][]int64{}
	for i, id := range ids {
		k := "k" + string(rune('0'+(i+1)%7))
		byKey[k] = append(byKey[k], id)
	}
	stuck := byKey["k3"]
	d := &headRefusingDriver{poison: map[int64]bool{stuck[0]: true}}
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "d", Driver: d}})
	must(t, err)
	pub, err := rt.Publisher("orders")
	must(t, err)
	rec := newRecorder()
	p := pipeline(t, f, dispatch.PipelineConfig{Ordered: true, BatchSize: 8}, pub, rec)
	run(t, p)

	// Every other key is delivered in full and in order; k3's head fails, its nine
	// successors wait.
	waitFor(t, 30*time.Second, "the other keys delivered", func() bool { return f.counts(t)["delivered"] == 60 })
	for k, want := range byKey {
		got := d.confirmed(k)
		if k == "k3" {
			if len(got) != 0 {
				t.Fatalf("key k3 behind its failed head: %v published", got)
			}
			continue
		}
		if !equalIDs(got, want) {
			t.Fatalf("key %s published %v, want %v", k, got, want)
		}
	}
	c := f.counts(t)
	if c["failed"] != 1 || c["pending"] != 9 {
		t.Fatalf("rows by status %v, want 1 failed head and 9 waiting", c)
	}
	blocked, err := f.store.Blocked(f.ctx, []string{"orders"})
	must(t, err)
	if blocked[0].Keys != 1 || blocked[0].Waiting != 9 {
		t.Fatalf("blocked %+v, want 1 key with 9 waiting", blocked[0])
	}

	// Skipping the head lets the key continue, in order.
	id, ok, err := f.store.SkipHead(f.ctx, "orders", "k3")
	if err != nil || !ok || id != stuck[0] {
		t.Fatalf("skip: %d %v %v, want %d", id, ok, err, stuck[0])
	}
	p.Wake()
	waitFor(t, 30*time.Second, "k3's successors delivered", func() bool { return f.counts(t)["delivered"] == 69 })
	if got := d.confirmed("k3"); !equalIDs(got, stuck[1:]) {
		t.Fatalf("key k3 after the skip published %v, want %v", got, stuck[1:])
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
