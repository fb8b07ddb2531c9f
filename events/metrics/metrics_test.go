package metrics_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/events/metrics"
)

// fixture is a registry with outboxd's series for two streams on two drivers, plus a
// dead-letter-only driver.
type fixture struct {
	reg *prometheus.Registry
	m   *metrics.Metrics
}

func setup(t *testing.T) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg,
		map[string]string{"orders": "bus", "shipments": "events"},
		map[string]string{"bus": "kafka", "events": "jetstream", "dlq": "nats"},
		metrics.BuildInfo{Version: "1.2.3", GoVersion: "go1.26.0"})
	return &fixture{reg: reg, m: m}
}

// series returns every sample of the family name as "label=value,…" → value; a
// histogram's sample is its count.
func (f *fixture) series(t *testing.T, name string) map[string]float64 {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		out := map[string]float64{}
		for _, s := range mf.GetMetric() {
			out[labelKey(s.GetLabel())] = sampleValue(s)
		}
		return out
	}
	return nil
}

// value is one sample of the family name, failing t when it does not exist.
func (f *fixture) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	key := strings.Join(labels, ",")
	v, ok := f.series(t, name)[key]
	if !ok {
		t.Fatalf("%s{%s} does not exist; the family has %v", name, key, f.series(t, name))
	}
	return v
}

func labelKey(pairs []*dto.LabelPair) string {
	parts := make([]string, 0, len(pairs))
	for _, p := range pairs {
		parts = append(parts, p.GetName()+"="+p.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func sampleValue(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Histogram != nil:
		return float64(s.Histogram.GetSampleCount())
	}
	return s.GetUntyped().GetValue()
}

func TestNewCreatesEverySeriesAtZeroForEveryConfiguredStreamAndDriver(t *testing.T) {
	f := setup(t)
	perStream := []string{
		"outboxd_messages_claimed_total", "outboxd_messages_published_total", "outboxd_messages_retried_total",
		"outboxd_messages_deferred_total", "outboxd_messages_released_total", "outboxd_lease_conflicts_total",
		"outboxd_delivery_lag_seconds", "outboxd_publish_duration_seconds", "outboxd_batch_size_messages",
		"outboxd_iteration_duration_seconds", "outboxd_oldest_pending_age_seconds", "outboxd_stream_paused",
		"outboxd_messages_held_back_total", "outboxd_order_violations_total",
		"outboxd_ordered_blocked_keys", "outboxd_ordered_blocked_messages", "outboxd_stream_flowing",
	}
	for _, name := range perStream {
		for _, stream := range []string{"orders", "shipments"} {
			if v := f.value(t, name, "stream="+stream); v != 0 {
				t.Errorf("%s{stream=%s} = %v at start, want 0", name, stream, v)
			}
		}
	}
	for _, stream := range []string{"orders", "shipments"} {
		for _, reason := range []string{"attempts_exhausted", "max_defer", "permanent"} {
			f.value(t, "outboxd_messages_failed_total", "reason="+reason, "stream="+stream)
		}
		for _, status := range []string{"deferred", "failed", "leased", "pending"} {
			f.value(t, "outboxd_backlog_messages", "status="+status, "stream="+stream)
		}
		for _, result := range []string{"forwarded", "gave_up", "retried"} {
			f.value(t, "outboxd_dead_letter_forwards_total", "result="+result, "stream="+stream)
		}
		for _, state := range []string{"closed", "half-open", "open"} {
			f.value(t, "outboxd_breaker_transitions_total", "state="+state, "stream="+stream)
		}
	}
	for _, driver := range []string{"bus", "dlq", "events"} {
		for _, kind := range []string{"canceled", "held_back", "permanent", "retryable", "unreachable"} {
			f.value(t, "outboxd_broker_errors_total", "driver="+driver, "kind="+kind)
		}
	}
	for _, op := range []string{"claim", "janitor", "write_back"} {
		f.value(t, "outboxd_database_errors_total", "operation="+op)
	}
	for _, r := range []string{"error", "ran", "skipped"} {
		f.value(t, "outboxd_janitor_cycles_total", "result="+r)
	}
	for _, name := range []string{"outboxd_leases_reclaimed_total", "outboxd_lease_overdue_seconds",
		"outboxd_retention_deleted_rows_total", "outboxd_partitions_created_total", "outboxd_partitions_dropped_total",
		"outboxd_default_partition_rows", "outboxd_janitor_cycle_duration_seconds", "outboxd_listener_reconnects_total",
		"outboxd_listener_connected", "outboxd_notifications_received_total"} {
		if v := f.value(t, name); v != 0 {
			t.Errorf("%s = %v at start, want 0", name, v)
		}
	}
	if v := f.value(t, "outboxd_build_info", "go_version=go1.26.0", "version=1.2.3"); v != 1 {
		t.Errorf("outboxd_build_info = %v, want 1", v)
	}
	f.value(t, "outboxd_stream_info", "driver=bus", "stream=orders")
	f.value(t, "outboxd_driver_info", "driver=dlq", "type=nats")
	// Nothing outside the configuration exists.
	for key := range f.series(t, "outboxd_messages_published_total") {
		if key != "stream=orders" && key != "stream=shipments" {
			t.Errorf("unexpected series outboxd_messages_published_total{%s}", key)
		}
	}
}

func TestEverySeriesPassesThePrometheusNamingLint(t *testing.T) {
	f := setup(t)
	f.m.ObserveBus(busCounters{}, "deadletter")
	problems, err := testutil.GatherAndLint(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestAnIterationIsCountedIntoItsStreamsSeries(t *testing.T) {
	f := setup(t)
	f.m.Handle(events.Iteration{
		Stream: "orders", Claimed: 10, Published: 5, Retried: 1, Deferred: 2, Failed: 2, Released: 0,
		FailReasons:    map[string]int{"permanent": 1, "max_defer": 1},
		ErrorKinds:     map[string]int{"permanent": 1, "unreachable": 3, "retryable": 1},
		DeliveryLags:   []time.Duration{time.Millisecond, 2 * time.Second, 3 * time.Second, time.Minute, time.Hour},
		LeaseConflicts: 1,
		Claim:          10 * time.Millisecond, Publish: 20 * time.Millisecond, WriteBack: 30 * time.Millisecond,
	})
	for name, want := range map[string]float64{
		"outboxd_messages_claimed_total":   10,
		"outboxd_messages_published_total": 5,
		"outboxd_messages_retried_total":   1,
		"outboxd_messages_deferred_total":  2,
		"outboxd_messages_released_total":  0,
		"outboxd_lease_conflicts_total":    1,
		"outboxd_delivery_lag_seconds":     5, // observations
		"outboxd_batch_size_messages":      1,
		"outboxd_publish_duration_seconds": 1,
	} {
		if got := f.value(t, name, "stream=orders"); got != want {
			t.Errorf("%s{stream=orders} = %v, want %v", name, got, want)
		}
		if got := f.value(t, name, "stream=shipments"); got != 0 {
			t.Errorf("%s{stream=shipments} = %v, want 0 (another stream's iteration)", name, got)
		}
	}
	if got := f.value(t, "outboxd_messages_failed_total", "reason=permanent", "stream=orders"); got != 1 {
		t.Errorf("failed{permanent} = %v, want 1", got)
	}
	if got := f.value(t, "outboxd_messages_failed_total", "reason=max_defer", "stream=orders"); got != 1 {
		t.Errorf("failed{max_defer} = %v, want 1", got)
	}
	// Broker errors are the stream's driver's.
	if got := f.value(t, "outboxd_broker_errors_total", "driver=bus", "kind=unreachable"); got != 3 {
		t.Errorf("broker_errors{bus,unreachable} = %v, want 3", got)
	}
	if got := f.value(t, "outboxd_broker_errors_total", "driver=events", "kind=unreachable"); got != 0 {
		t.Errorf("broker_errors{events,unreachable} = %v, want 0", got)
	}
	// The iteration's duration is claim + publish + write-back: 60ms falls in le=0.1, not le=0.05.
	h := f.histogram(t, "outboxd_iteration_duration_seconds", "stream=orders")
	if got := h.GetSampleSum(); got < 0.0599 || got > 0.0601 {
		t.Errorf("iteration duration sum = %v, want 0.06", got)
	}
	// The database clock's lag: one hour lands in the last finite bucket.
	lag := f.histogram(t, "outboxd_delivery_lag_seconds", "stream=orders")
	if got := cumulative(lag, 3600); got != 5 {
		t.Errorf("lag observations ≤ 3600s = %v, want 5", got)
	}
	if got := cumulative(lag, 1); got != 1 {
		t.Errorf("lag observations ≤ 1s = %v, want 1", got)
	}
}

func (f *fixture) histogram(t *testing.T, name string, labels ...string) *dto.Histogram {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Join(labels, ",")
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			if labelKey(s.GetLabel()) == key {
				return s.GetHistogram()
			}
		}
	}
	t.Fatalf("no histogram %s{%s}", name, key)
	return nil
}

func cumulative(h *dto.Histogram, le float64) float64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return float64(b.GetCumulativeCount())
		}
	}
	return -1
}

func TestEventsOutsideTheConfigurationAreCountedAsOther(t *testing.T) {
	f := setup(t)
	f.m.Handle(events.Iteration{Stream: "ghost", Claimed: 3, Failed: 1,
		FailReasons: map[string]int{"mystery": 1}, ErrorKinds: map[string]int{"weird": 2}})
	f.m.Handle(events.Iteration{Stream: "orders", FailReasons: map[string]int{"mystery": 4}})
	f.m.Handle(events.DeadLetterForwarded{Stream: "orders", Result: "lost in the post"})
	f.m.Handle(events.Backlog{Stream: "ghost", Pending: 99})
	f.m.Handle(events.BreakerChanged{Stream: "ghost", From: events.BreakerClosed, To: events.BreakerOpen})
	f.m.Handle(events.BlockedKeys{Stream: "ghost", Keys: 3, Waiting: 30})
	f.m.Handle(events.Iteration{Stream: "ghost", HeldBack: 5, OrderViolations: 1})

	if got := f.value(t, "outboxd_messages_claimed_total", "stream=_other"); got != 3 {
		t.Errorf("claimed{_other} = %v, want 3", got)
	}
	if got := f.value(t, "outboxd_messages_failed_total", "reason=_other", "stream=_other"); got != 1 {
		t.Errorf("failed{_other,_other} = %v, want 1", got)
	}
	if got := f.value(t, "outboxd_messages_failed_total", "reason=_other", "stream=orders"); got != 4 {
		t.Errorf("failed{orders,_other} = %v, want 4", got)
	}
	if got := f.value(t, "outboxd_broker_errors_total", "driver=_other", "kind=_other"); got != 2 {
		t.Errorf("broker_errors{_other,_other} = %v, want 2", got)
	}
	if got := f.value(t, "outboxd_dead_letter_forwards_total", "result=_other", "stream=orders"); got != 1 {
		t.Errorf("dead_letter_forwards{orders,_other} = %v, want 1", got)
	}
	if got := f.value(t, "outboxd_breaker_transitions_total", "state=open", "stream=_other"); got != 1 {
		t.Errorf("breaker_transitions{_other,open} = %v, want 1", got)
	}
	if got := f.value(t, "outboxd_messages_held_back_total", "stream=_other"); got != 5 {
		t.Errorf("held_back{_other} = %v, want 5", got)
	}
	if got := f.value(t, "outboxd_order_violations_total", "stream=_other"); got != 1 {
		t.Errorf("order_violations{_other} = %v, want 1", got)
	}
	// Gauges have no "_other": a sample of an unknown stream is ignored.
	for _, name := range []string{"outboxd_backlog_messages", "outboxd_stream_paused", "outboxd_oldest_pending_age_seconds",
		"outboxd_ordered_blocked_keys", "outboxd_ordered_blocked_messages"} {
		for key := range f.series(t, name) {
			if strings.Contains(key, "ghost") || strings.Contains(key, other) {
				t.Errorf("gauge %s{%s} exists for a stream outside the configuration", name, key)
			}
		}
	}
	// The label values stay bounded however many unknown streams report.
	for i := range 100 {
		f.m.Handle(events.Iteration{Stream: fmt.Sprintf("ghost-%d", i), Claimed: 1})
	}
	if n := len(f.series(t, "outboxd_messages_claimed_total")); n != 3 {
		t.Errorf("claimed has %d series after 100 unknown streams, want 3 (orders, shipments, _other)", n)
	}
}

const other = "_other"

func TestABacklogSampleSetsTheStatusGaugesWithDeferredSplitOutOfPending(t *testing.T) {
	f := setup(t)
	f.m.Handle(events.Backlog{Stream: "orders", Pending: 10, Deferred: 4, Leased: 3, Failed: 2, OldestPendingAge: 90 * time.Second})
	for status, want := range map[string]float64{"pending": 6, "deferred": 4, "leased": 3, "failed": 2} {
		if got := f.value(t, "outboxd_backlog_messages", "status="+status, "stream=orders"); got != want {
			t.Errorf("backlog{orders,%s} = %v, want %v", status, got, want)
		}
	}
	if got := f.value(t, "outboxd_oldest_pending_age_seconds", "stream=orders"); got != 90 {
		t.Errorf("oldest pending age = %v, want 90", got)
	}
	// A later sample replaces the earlier one.
	f.m.Handle(events.Backlog{Stream: "orders"})
	if got := f.value(t, "outboxd_backlog_messages", "status=pending", "stream=orders"); got != 0 {
		t.Errorf("backlog{orders,pending} after an empty sample = %v, want 0", got)
	}
}

func TestAnOrderedStreamsHeldBackMessagesViolationsAndBlockedKeysMoveItsSeries(t *testing.T) {
	f := setup(t)
	f.m.Handle(events.Iteration{Stream: "orders", Claimed: 10, Published: 4, Failed: 1, HeldBack: 5, OrderViolations: 1,
		FailReasons: map[string]int{"permanent": 1}, ErrorKinds: map[string]int{"permanent": 1, "held_back": 5}})
	f.m.Handle(events.Iteration{Stream: "orders", Claimed: 3, HeldBack: 3, ErrorKinds: map[string]int{"held_back": 3}})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"outboxd_messages_held_back_total", []string{"stream=orders"}, 8},
		{"outboxd_order_violations_total", []string{"stream=orders"}, 1},
		{"outboxd_broker_errors_total", []string{"driver=bus", "kind=held_back"}, 8},
		{"outboxd_broker_errors_total", []string{"driver=_other", "kind=_other"}, -1}, // held_back is a known kind
		{"outboxd_messages_held_back_total", []string{"stream=shipments"}, 0},
	} {
		got, ok := f.series(t, c.name)[strings.Join(c.labels, ",")]
		switch {
		case c.want < 0 && ok:
			t.Errorf("%s{%s} exists (%v); want no such series", c.name, strings.Join(c.labels, ","), got)
		case c.want >= 0 && got != c.want:
			t.Errorf("%s{%s} = %v, want %v", c.name, strings.Join(c.labels, ","), got, c.want)
		}
	}

	// A blocked-key sample sets the gauges; a later one (the head skipped) sets them back.
	f.m.Handle(events.BlockedKeys{Stream: "orders", Keys: 2, Waiting: 17})
	if k, w := f.value(t, "outboxd_ordered_blocked_keys", "stream=orders"), f.value(t, "outboxd_ordered_blocked_messages", "stream=orders"); k != 2 || w != 17 {
		t.Errorf("blocked keys %v, messages %v; want 2 and 17", k, w)
	}
	if k := f.value(t, "outboxd_ordered_blocked_keys", "stream=shipments"); k != 0 {
		t.Errorf("shipments blocked keys = %v, want 0 (another stream's sample)", k)
	}
	f.m.Handle(events.BlockedKeys{Stream: "orders"})
	if k, w := f.value(t, "outboxd_ordered_blocked_keys", "stream=orders"), f.value(t, "outboxd_ordered_blocked_messages", "stream=orders"); k != 0 || w != 0 {
		t.Errorf("after an empty sample: blocked keys %v, messages %v; want 0 and 0", k, w)
	}
}

func TestAStreamIsPausedWhileItsBreakerIsOpenOrHalfOpen(t *testing.T) {
	f := setup(t)
	steps := []struct {
		from, to events.BreakerState
		paused   float64
	}{
		{events.BreakerClosed, events.BreakerOpen, 1},
		{events.BreakerOpen, events.BreakerHalfOpen, 1},
		{events.BreakerHalfOpen, events.BreakerOpen, 1},
		{events.BreakerOpen, events.BreakerHalfOpen, 1},
		{events.BreakerHalfOpen, events.BreakerClosed, 0},
	}
	for _, s := range steps {
		f.m.Handle(events.BreakerChanged{Stream: "shipments", From: s.from, To: s.to})
		if got := f.value(t, "outboxd_stream_paused", "stream=shipments"); got != s.paused {
			t.Errorf("after %s → %s: paused = %v, want %v", s.from, s.to, got, s.paused)
		}
	}
	if got := f.value(t, "outboxd_stream_paused", "stream=orders"); got != 0 {
		t.Errorf("orders paused = %v, want 0 (another stream's breaker)", got)
	}
	for state, want := range map[string]float64{"open": 2, "half-open": 2, "closed": 1} {
		if got := f.value(t, "outboxd_breaker_transitions_total", "state="+state, "stream=shipments"); got != want {
			t.Errorf("transitions to %s = %v, want %v", state, got, want)
		}
	}
}

func TestJanitorListenerAndDatabaseEventsAreCounted(t *testing.T) {
	f := setup(t)
	boom := errors.New("connection refused")
	for _, e := range []events.Event{
		events.JanitorCycle{Duration: time.Second},
		events.JanitorCycle{Skipped: true},
		events.JanitorCycle{Skipped: true},
		events.JanitorCycle{Err: boom},
		events.LeasesReclaimed{Count: 2, Overdue: []time.Duration{time.Second, time.Minute}},
		events.RetentionSwept{Deleted: 5000, Chunks: 1},
		events.RetentionSwept{Deleted: 17, Chunks: 1},
		events.PartitionChanged{Partition: "messages_p20260101", Created: true},
		events.PartitionChanged{Partition: "messages_p20260102", Created: true},
		events.PartitionChanged{Partition: "messages_p20251201"},
		events.DefaultPartitionRows{Rows: 12},
		events.ClaimFailed{Stream: "orders", Err: boom},
		events.Iteration{Stream: "orders", Err: boom},
		events.ListenerState{Connected: true},
		events.ListenerState{Connected: false, Err: boom},
		events.ListenerState{Connected: false, Err: boom},
		events.DeadLetterForwarded{Stream: "orders", Result: events.DeadLetterRetried},
		events.DeadLetterForwarded{Stream: "orders", Result: events.DeadLetterForwardedOK},
		events.MessageFailed{Stream: "orders"},
	} {
		f.m.Handle(e)
	}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"outboxd_janitor_cycles_total", []string{"result=ran"}, 1},
		{"outboxd_janitor_cycles_total", []string{"result=skipped"}, 2},
		{"outboxd_janitor_cycles_total", []string{"result=error"}, 1},
		{"outboxd_janitor_cycle_duration_seconds", nil, 4},
		{"outboxd_leases_reclaimed_total", nil, 2},
		{"outboxd_lease_overdue_seconds", nil, 2},
		{"outboxd_retention_deleted_rows_total", nil, 5017},
		{"outboxd_partitions_created_total", nil, 2},
		{"outboxd_partitions_dropped_total", nil, 1},
		{"outboxd_default_partition_rows", nil, 12},
		{"outboxd_database_errors_total", []string{"operation=claim"}, 1},
		{"outboxd_database_errors_total", []string{"operation=write_back"}, 1},
		{"outboxd_database_errors_total", []string{"operation=janitor"}, 1},
		{"outboxd_listener_reconnects_total", nil, 2},
		{"outboxd_listener_connected", nil, 0},
		{"outboxd_dead_letter_forwards_total", []string{"result=retried", "stream=orders"}, 1},
		{"outboxd_dead_letter_forwards_total", []string{"result=forwarded", "stream=orders"}, 1},
		{"outboxd_messages_failed_total", []string{"reason=permanent", "stream=orders"}, 0}, // MessageFailed is not counted twice
	}
	for _, c := range checks {
		if got := f.value(t, c.name, c.labels...); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, strings.Join(c.labels, ","), got, c.want)
		}
	}
	f.m.Handle(events.ListenerState{Connected: true})
	if got := f.value(t, "outboxd_listener_connected", ""); got != 1 {
		t.Errorf("listener_connected after a connect event = %v, want 1", got)
	}
}

// listener is a hand-written ListenerStatus.
type listener struct {
	mu        sync.Mutex
	received  uint64
	connected bool
}

func (l *listener) Received() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return l.received }
func (l *listener) Connected() bool  { l.mu.Lock(); defer l.mu.Unlock(); return l.connected }

func TestAnObservedListenerIsReadAtScrapeTime(t *testing.T) {
	f := setup(t)
	l := &listener{received: 41, connected: true}
	f.m.ObserveListener(l)
	if got := f.value(t, "outboxd_notifications_received_total", ""); got != 41 {
		t.Errorf("notifications received = %v, want 41", got)
	}
	if got := f.value(t, "outboxd_listener_connected", ""); got != 1 {
		t.Errorf("listener connected = %v, want 1", got)
	}
	// The listener's own state wins over its events.
	f.m.Handle(events.ListenerState{Connected: false})
	if got := f.value(t, "outboxd_listener_connected", ""); got != 1 {
		t.Errorf("listener connected = %v after a stale event, want 1 (the listener says so)", got)
	}
	l.mu.Lock()
	l.received, l.connected = 42, false
	l.mu.Unlock()
	if got := f.value(t, "outboxd_notifications_received_total", ""); got != 42 {
		t.Errorf("notifications received = %v, want 42", got)
	}
	if got := f.value(t, "outboxd_listener_connected", ""); got != 0 {
		t.Errorf("listener connected = %v, want 0", got)
	}
}

// busCounters is a hand-written BusCounters: name → dropped, panics.
type busCounters map[string][2]uint64

func (b busCounters) Dropped(name string) uint64 { return b[name][0] }
func (b busCounters) Panics(name string) uint64  { return b[name][1] }

func TestBusDropsAndPanicsAreExposedPerNamedSubscriber(t *testing.T) {
	f := setup(t)
	f.m.ObserveBus(busCounters{"deadletter": {7, 0}, "metrics": {0, 2}, "unnamed": {99, 99}}, "deadletter", "metrics")
	f.m.ObserveBus(busCounters{}, "ignored") // only the first call counts
	for _, c := range []struct {
		name, subscriber string
		want             float64
	}{
		{"outboxd_event_bus_dropped_total", "deadletter", 7},
		{"outboxd_event_bus_dropped_total", "metrics", 0},
		{"outboxd_event_bus_panics_total", "metrics", 2},
		{"outboxd_event_bus_panics_total", "deadletter", 0},
	} {
		if got := f.value(t, c.name, "subscriber="+c.subscriber); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.subscriber, got, c.want)
		}
	}
	if n := len(f.series(t, "outboxd_event_bus_dropped_total")); n != 2 {
		t.Errorf("dropped has %d series, want 2 (the named subscribers only)", n)
	}
}

func TestARealBusDeliversEveryEventToTheMetrics(t *testing.T) {
	f := setup(t)
	bus := events.NewBus(nil)
	bus.Subscribe("metrics", f.m.Handle)
	f.m.ObserveBus(bus, "metrics")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				bus.Emit(events.Iteration{Stream: "orders", Claimed: 2, Published: 2,
					DeliveryLags: []time.Duration{time.Millisecond, time.Millisecond}})
			}
		}()
	}
	wg.Wait()
	if got := f.value(t, "outboxd_messages_published_total", "stream=orders"); got != 16000 {
		t.Errorf("published = %v after 8000 concurrent iterations of 2, want 16000", got)
	}
	if got := f.value(t, "outboxd_delivery_lag_seconds", "stream=orders"); got != 16000 {
		t.Errorf("lag observations = %v, want 16000", got)
	}
	if got := f.value(t, "outboxd_event_bus_panics_total", "subscriber=metrics"); got != 0 {
		t.Errorf("metrics subscriber panicked %v times", got)
	}
}

func TestAStreamIsFlowingBetweenItsFlowsStartAndEnd(t *testing.T) {
	f := setup(t)
	for _, flowing := range []bool{true, false, true} {
		f.m.Handle(events.FlowChanged{Stream: "orders", Flowing: flowing})
		want := 0.0
		if flowing {
			want = 1
		}
		if got := f.value(t, "outboxd_stream_flowing", "stream=orders"); got != want {
			t.Errorf("after FlowChanged{Flowing: %v}: flowing = %v, want %v", flowing, got, want)
		}
	}
	if got := f.value(t, "outboxd_stream_flowing", "stream=shipments"); got != 0 {
		t.Errorf("shipments flowing = %v, want 0 (another stream's flow)", got)
	}
	f.m.Handle(events.FlowChanged{Stream: "ghost", Flowing: true}) // an unconfigured stream: no gauge, no panic
}

func TestEachExpiredMessageIsCountedIntoItsStream(t *testing.T) {
	f := setup(t)
	if v := f.value(t, "outboxd_messages_expired_total", "stream=orders"); v != 0 {
		t.Fatalf("before any expiry: %v", v)
	}
	for range 3 {
		f.m.Handle(events.MessageExpired{Stream: "orders", ID: 1})
	}
	f.m.Handle(events.MessageExpired{Stream: "nobody-configured", ID: 2})
	if v := f.value(t, "outboxd_messages_expired_total", "stream=orders"); v != 3 {
		t.Errorf("orders: %v, want 3", v)
	}
	if v := f.value(t, "outboxd_messages_expired_total", "stream=_other"); v != 1 {
		t.Errorf("_other: %v, want 1", v)
	}
	if v := f.value(t, "outboxd_messages_expired_total", "stream=shipments"); v != 0 {
		t.Errorf("shipments: %v, want 0", v)
	}
}
