package console

// What the streams page shows beside the sampled backlog: each stream's recent
// throughput and its dead-lettered messages, counted from the dispatcher's own events
// (the same events the metrics count), never read from the table.

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/events"
)

// The throughput ring: activitySlots buckets of activitySlot each.
const (
	activitySlot  = 10 * time.Second
	activitySlots = 30
)

// Activity counts, per stream, the messages this replica published in each of the last
// activitySlots slots, and the messages it forwarded to a dead-letter destination since
// it started. Observe is its bus subscriber; it takes a lock briefly and never blocks.
type Activity struct {
	now func() time.Time
	mu  sync.Mutex
	per map[string]*streamActivity
}

type streamActivity struct {
	slots        [activitySlots]struct{ at, n int64 }
	deadLettered int64
}

// NewActivity returns an empty Activity; now is its clock (nil: time.Now).
func NewActivity(now func() time.Time) *Activity {
	if now == nil {
		now = time.Now
	}
	return &Activity{now: now, per: map[string]*streamActivity{}}
}

// IsActivity is the bus filter of Observe: the events it counts.
func IsActivity(e events.Event) bool {
	switch e.(type) {
	case events.Iteration, events.DeadLetterForwarded:
		return true
	}
	return false
}

func (a *Activity) stream(name string) *streamActivity {
	s := a.per[name]
	if s == nil {
		s = &streamActivity{}
		a.per[name] = s
	}
	return s
}

// Observe counts one event.
func (a *Activity) Observe(e events.Event) {
	switch e := e.(type) {
	case events.Iteration:
		if e.Published == 0 {
			return
		}
		at := a.now().UnixNano() / int64(activitySlot)
		a.mu.Lock()
		b := &a.stream(e.Stream).slots[at%activitySlots]
		if b.at != at {
			b.at, b.n = at, 0
		}
		b.n += int64(e.Published)
		a.mu.Unlock()
	case events.DeadLetterForwarded:
		if e.Result != events.DeadLetterForwardedOK {
			return
		}
		a.mu.Lock()
		a.stream(e.Stream).deadLettered++
		a.mu.Unlock()
	}
}

// Throughput is one stream's recent activity as the page shows it.
type Throughput struct {
	// PerSlot is the messages published in each slot, oldest first; the last slot is
	// the one under way.
	PerSlot      []int64
	DeadLettered int64
}

// Of returns stream's activity now.
func (a *Activity) Of(stream string) Throughput {
	now := a.now().UnixNano() / int64(activitySlot)
	t := Throughput{PerSlot: make([]int64, activitySlots)}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.per[stream]
	if s == nil {
		return t
	}
	for i := range activitySlots {
		at := now - activitySlots + 1 + int64(i)
		if b := s.slots[at%activitySlots]; b.at == at {
			t.PerSlot[i] = b.n
		}
	}
	t.DeadLettered = s.deadLettered
	return t
}

// Rate is the messages per second over the last full minute.
func (t Throughput) Rate() float64 {
	perMinute := int(time.Minute / activitySlot)
	n := len(t.PerSlot)
	if n < perMinute+1 {
		return 0
	}
	var sum int64
	for _, v := range t.PerSlot[n-1-perMinute : n-1] {
		sum += v
	}
	return float64(sum) / time.Minute.Seconds()
}

// Sparkline width and height, in the SVG's own units.
const sparkW, sparkH = 120, 24

// Points is the sparkline's polyline: one point per slot, scaled to the busiest one.
func (t Throughput) Points() string {
	var most int64 = 1
	for _, v := range t.PerSlot {
		most = max(most, v)
	}
	var b strings.Builder
	step := float64(sparkW) / float64(max(len(t.PerSlot)-1, 1))
	for i, v := range t.PerSlot {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", float64(i)*step, float64(sparkH)-1-float64(v)*float64(sparkH-2)/float64(most))
	}
	return b.String()
}
