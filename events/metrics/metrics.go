// Package metrics turns outboxd's events into Prometheus series.
//
// Invariants: every series a dashboard or an alert reads exists from the start, at zero,
// for every configured stream and driver, so that "nothing happened" reads 0 and never
// "absent"; and every label value comes from the configuration or from a fixed
// vocabulary, so the number of series is bounded by the configuration whatever the
// events carry. An event naming a stream that is not configured is counted under the
// stream "_other" (configured names cannot start with "_"); an unknown reason, kind or
// result is counted as "_other" likewise.
//
// Handle runs inline in every Emit (a synchronous bus subscriber), so each stream's
// series are resolved once, at construction, and handling an event allocates nothing.
//
// Package metrics is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package metrics

import (
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

const namespace = "outboxd"

// other is the label value for anything outside the configured or known values.
const other = "_other"

// Fixed label vocabularies, each in the order of the array that holds its series.
var (
	// failReasons are MessageFailed.Reason's values (dispatch names them; events has no
	// constants for them).
	failReasons      = []string{"permanent", "attempts_exhausted", "max_defer"}
	brokerErrorKinds = []string{router.KindRetryable.String(), router.KindPermanent.String(),
		router.KindUnreachable.String(), router.KindCanceled.String(), router.KindHeldBack.String()}
	deadLetterResult = []string{string(events.DeadLetterForwardedOK), string(events.DeadLetterRetried),
		string(events.DeadLetterGaveUp)}
	breakerStates   = []string{string(events.BreakerClosed), string(events.BreakerOpen), string(events.BreakerHalfOpen)}
	backlogStatuses = []string{statusPending: "pending", statusDeferred: "deferred", statusLeased: "leased", statusFailed: "failed"}
	janitorResults  = []string{janitorRan: "ran", janitorSkipped: "skipped", janitorError: "error"}
	dbOperations    = []string{opClaim: "claim", opWriteBack: "write_back", opJanitor: "janitor"}
)

// Indexes into backlogStatuses, janitorResults and dbOperations.
const (
	statusPending = iota
	statusDeferred
	statusLeased
	statusFailed
)

const (
	janitorRan = iota
	janitorSkipped
	janitorError
)

const (
	opClaim = iota
	opWriteBack
	opJanitor
)

// Histogram buckets, in seconds unless named otherwise.
var (
	// Delivery lag runs from milliseconds (a woken pipeline) to hours (a broker outage).
	lagBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// One batch's publish, or a whole iteration, bounded by publish_timeout (10s default).
	durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// Rows per claimed batch (batch_size 100 by default).
	batchBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}
	// How long a reclaimed lease had been expired: up to one janitor interval (30s) when
	// a replica died, much more when no janitor ran.
	overdueBuckets = []float64{.1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600}
	// A janitor cycle: a lock attempt, or reclaiming and purging.
	janitorBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300}
)

// BuildInfo labels outboxd_build_info.
type BuildInfo struct {
	Version   string // "" reads "unknown"
	GoVersion string // "" reads runtime.Version()
}

// ListenerStatus is what the notification listener exposes (*dispatch.Listener).
type ListenerStatus interface {
	Received() uint64 // notifications received since start
	Connected() bool  // holding a listening connection now
}

// BusCounters is what the event bus counts per subscriber (*events.Bus).
type BusCounters interface {
	Dropped(name string) uint64
	Panics(name string) uint64
}

// Metrics holds outboxd's series. Handle is safe for concurrent use.
type Metrics struct {
	reg prometheus.Registerer
	v   vecs

	streams   map[string]*streamSeries // configured streams, read-only after New
	otherOnce sync.Once
	others    *streamSeries // unconfigured streams, built on first need

	leasesReclaimed      prometheus.Counter
	leaseOverdue         prometheus.Observer
	retentionDeleted     prometheus.Counter
	partitionsCreated    prometheus.Counter
	partitionsDropped    prometheus.Counter
	defaultPartitionRows prometheus.Gauge
	// Streams with pending rows no pipeline of this replica drains; no stream label,
	// because those names come from producers and are unbounded.
	unservedMessages, unservedStreams, unservedOldest prometheus.Gauge
	janitorCycles                                     [3]prometheus.Counter // by janitorResults
	janitorDuration                                   prometheus.Observer
	listenerReconnects                                prometheus.Counter
	dbErrors                                          [3]prometheus.Counter // by dbOperations

	// listenerUp is the listener's state as its events tell it, read until
	// ObserveListener hands over the listener itself.
	listenerUp atomic.Bool
	listener   atomic.Pointer[ListenerStatus]
	busOnce    sync.Once
}

// vecs are the labelled families; children for configured values are resolved in New.
type vecs struct {
	claimed, published, retried, deferred, released, leaseConflicts *prometheus.CounterVec
	heldBack, orderViolations, duplicates, replayed, expired        *prometheus.CounterVec
	failed, brokerErrors, deadLetter, breakerTransitions            *prometheus.CounterVec
	lag, publish, batch, iteration                                  *prometheus.HistogramVec
	oldestAge, backlog, paused, blockedKeys, blockedMessages        *prometheus.GaugeVec
	flowing, replaysRunning, replayRemaining                        *prometheus.GaugeVec
}

// streamSeries are one stream's resolved children.
type streamSeries struct {
	claimed, published, retried, deferred, released, leaseConflicts prometheus.Counter
	heldBack, orderViolations, duplicates, expired                  prometheus.Counter

	failed             [3]prometheus.Counter // by failReasons
	brokerErrors       [5]prometheus.Counter // by brokerErrorKinds, of the stream's driver
	deadLetter         [3]prometheus.Counter // by deadLetterResult
	breakerTransitions [3]prometheus.Counter // by breakerStates

	lag, publish, batch, iteration prometheus.Observer

	// Gauges exist for configured streams only: a stream outside the configuration
	// has no state worth a gauge, and "_other" would mix several.
	oldestAge, paused, flowing prometheus.Gauge
	backlog                    [4]prometheus.Gauge // by backlogStatuses
	// Blocked keys exist for every configured stream and stay 0 on one that is not
	// ordered (nothing samples it), so a query need not know which streams are.
	blockedKeys, blockedMessages prometheus.Gauge
	// Replays: the gauges as last sampled, and the counter moved by the growth of the
	// sampled all-time total (replayedSeen, the last total this replica saw).
	replaysRunning, replayRemaining prometheus.Gauge
	replayed                        prometheus.Counter
	replayedSeen                    atomic.Int64
	name, driver                    string
}

// New creates every series on reg: for each stream of streams (stream → driver name)
// and each driver of drivers (driver name → type), all at zero. It panics when reg
// already holds outboxd's series (New is called once per registry).
func New(reg prometheus.Registerer, streams map[string]string, drivers map[string]string, build BuildInfo) *Metrics {
	m := &Metrics{reg: reg, streams: make(map[string]*streamSeries, len(streams))}
	stream := []string{"stream"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	m.v = vecs{
		claimed:   counter("messages_claimed_total", "Messages claimed (leased) for publishing.", stream...),
		published: counter("messages_published_total", "Messages confirmed by the broker and acknowledged in the outbox table.", stream...),
		retried:   counter("messages_retried_total", "Messages the broker refused this time, back to pending after a backoff (an attempt spent).", stream...),
		deferred:  counter("messages_deferred_total", "Messages whose broker was unreachable, back to pending without spending an attempt.", stream...),
		released:  counter("messages_released_total", "Messages handed back unpublished at shutdown.", stream...),
		failed: counter("messages_failed_total",
			"Messages failed for good, by reason: permanent (the broker will never take it), attempts_exhausted, max_defer.", "stream", "reason"),
		leaseConflicts: counter("lease_conflicts_total",
			"Write-backs refused because the row's lease had moved on (the batch outlived its lease).", stream...),
		expired: counter("messages_expired_total",
			"Messages not published because their expires_at or the stream's ttl ran out before delivery; their rows are marked expired.", stream...),
		heldBack: counter("messages_held_back_total",
			"Messages of ordered streams handed back unsent, without an attempt, because an earlier message of their key did not go through.", stream...),
		orderViolations: counter("order_violations_total",
			"Messages of ordered streams the broker confirmed although an earlier message of their key in the same batch failed; published again after it.", stream...),
		duplicates: counter("broker_duplicates_total",
			"Published messages the broker confirmed as duplicates of one it already held under the same de-duplication id (JetStream, postgres): "+
				"a re-publish after a lost acknowledgement, or ids that collide.", stream...),
		brokerErrors: counter("broker_errors_total",
			"Publish errors by driver and kind: retryable, permanent, unreachable, canceled, held_back (ordered streams: not sent behind a failed message of the key).", "driver", "kind"),
		deadLetter: counter("dead_letter_forwards_total",
			"Dead-letter forwarding outcomes by stream and result: forwarded, retried (an attempt failed; tried again), gave_up.", "stream", "result"),
		breakerTransitions: counter("breaker_transitions_total",
			"Circuit breaker state changes by stream and the state entered: closed, open, half-open.", "stream", "state"),
		lag: histogram("delivery_lag_seconds",
			"Time from a message's INSERT to its acknowledgement after the broker confirmed it, both on the database clock.", lagBuckets, stream...),
		publish:   histogram("publish_duration_seconds", "Time to publish one claimed batch to the broker.", durationBuckets, stream...),
		batch:     histogram("batch_size_messages", "Messages per claimed batch.", batchBuckets, stream...),
		iteration: histogram("iteration_duration_seconds", "Time of one batch from claim through publish to write-back.", durationBuckets, stream...),
		oldestAge: gauge("oldest_pending_age_seconds",
			"How long the oldest due pending message has waited since it became available, as last sampled (0 when none is due).", stream...),
		backlog: gauge("backlog_messages",
			"Messages by status as last sampled: pending (excluding deferred), deferred (pending, broker unreachable), leased, failed.", "stream", "status"),
		paused: gauge("stream_paused", "1 while the stream's circuit breaker is open or half-open (its broker unreachable), else 0.", stream...),
		flowing: gauge("stream_flowing",
			"1 while this replica's pipeline of the stream is flowing (polling every millisecond; producers' inserts do not notify), else 0.", stream...),
		blockedKeys: gauge("ordered_blocked_keys",
			"Keys of an ordered stream whose head failed for good and was not skipped, as last sampled (0 for a stream that is not ordered).", stream...),
		blockedMessages: gauge("ordered_blocked_messages",
			"Messages of an ordered stream waiting behind a failed head, as last sampled (0 for a stream that is not ordered).", stream...),
		replayed: counter("replay_messages_total",
			"Delivered messages copied back in line by replays of the stream, as the replays table records them (sampled; every replica counts the same copies).", stream...),
		replaysRunning: gauge("replays_running", "Replays of the stream still running (not done nor cancelled), as last sampled.", stream...),
		replayRemaining: gauge("replay_remaining_messages",
			"Messages the stream's running replays have yet to copy, as last sampled.", stream...),
	}
	reg.MustRegister(m.v.claimed, m.v.published, m.v.retried, m.v.deferred, m.v.released, m.v.failed,
		m.v.leaseConflicts, m.v.brokerErrors, m.v.deadLetter, m.v.breakerTransitions,
		m.v.lag, m.v.publish, m.v.batch, m.v.iteration, m.v.oldestAge, m.v.backlog, m.v.paused,
		m.v.heldBack, m.v.orderViolations, m.v.duplicates, m.v.expired, m.v.blockedKeys, m.v.blockedMessages, m.v.flowing,
		m.v.replayed, m.v.replaysRunning, m.v.replayRemaining)

	for _, name := range sortedKeys(streams) {
		s := m.resolve(name, streams[name])
		s.oldestAge = m.v.oldestAge.WithLabelValues(name)
		s.paused = m.v.paused.WithLabelValues(name)
		s.flowing = m.v.flowing.WithLabelValues(name)
		s.blockedKeys = m.v.blockedKeys.WithLabelValues(name)
		s.blockedMessages = m.v.blockedMessages.WithLabelValues(name)
		s.replayed = m.v.replayed.WithLabelValues(name)
		s.replaysRunning = m.v.replaysRunning.WithLabelValues(name)
		s.replayRemaining = m.v.replayRemaining.WithLabelValues(name)
		for i, st := range backlogStatuses {
			s.backlog[i] = m.v.backlog.WithLabelValues(name, st)
		}
		m.streams[name] = s
	}
	// Drivers no stream uses (a dead-letter destination) still get their error series.
	for _, d := range sortedKeys(drivers) {
		for _, k := range brokerErrorKinds {
			m.v.brokerErrors.WithLabelValues(d, k)
		}
	}

	m.registerProcessWide(reg, streams, drivers, build)
	return m
}

// resolve builds the counters and histograms of one stream routed to driver.
func (m *Metrics) resolve(name, driver string) *streamSeries {
	s := &streamSeries{
		name: name, driver: driver,
		claimed:         m.v.claimed.WithLabelValues(name),
		published:       m.v.published.WithLabelValues(name),
		retried:         m.v.retried.WithLabelValues(name),
		deferred:        m.v.deferred.WithLabelValues(name),
		released:        m.v.released.WithLabelValues(name),
		leaseConflicts:  m.v.leaseConflicts.WithLabelValues(name),
		heldBack:        m.v.heldBack.WithLabelValues(name),
		orderViolations: m.v.orderViolations.WithLabelValues(name),
		duplicates:      m.v.duplicates.WithLabelValues(name),
		expired:         m.v.expired.WithLabelValues(name),
		lag:             m.v.lag.WithLabelValues(name),
		publish:         m.v.publish.WithLabelValues(name),
		batch:           m.v.batch.WithLabelValues(name),
		iteration:       m.v.iteration.WithLabelValues(name),
	}
	for i, r := range failReasons {
		s.failed[i] = m.v.failed.WithLabelValues(name, r)
	}
	for i, k := range brokerErrorKinds {
		s.brokerErrors[i] = m.v.brokerErrors.WithLabelValues(driver, k)
	}
	for i, r := range deadLetterResult {
		s.deadLetter[i] = m.v.deadLetter.WithLabelValues(name, r)
	}
	for i, st := range breakerStates {
		s.breakerTransitions[i] = m.v.breakerTransitions.WithLabelValues(name, st)
	}
	return s
}

func (m *Metrics) registerProcessWide(reg prometheus.Registerer, streams, drivers map[string]string, build BuildInfo) {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Name: name, Help: help}
	}
	m.leasesReclaimed = prometheus.NewCounter(prometheus.CounterOpts(opts("leases_reclaimed_total",
		"Expired leases handed back to pending by the janitor (a replica died or stalled).")))
	overdue := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "lease_overdue_seconds",
		Help: "How long each reclaimed lease had been expired when the janitor reclaimed it.", Buckets: overdueBuckets})
	m.leaseOverdue = overdue
	m.retentionDeleted = prometheus.NewCounter(prometheus.CounterOpts(opts("retention_deleted_rows_total",
		"Delivered rows deleted by the janitor after their retention.")))
	m.partitionsCreated = prometheus.NewCounter(prometheus.CounterOpts(opts("partitions_created_total",
		"Partitions of the outbox table created by the janitor.")))
	m.partitionsDropped = prometheus.NewCounter(prometheus.CounterOpts(opts("partitions_dropped_total",
		"Partitions of the outbox table dropped by the janitor after retention.")))
	m.defaultPartitionRows = prometheus.NewGauge(prometheus.GaugeOpts(opts("default_partition_rows",
		"Rows in the default partition (dated outside every range partition), as last counted.")))
	m.unservedMessages = prometheus.NewGauge(prometheus.GaugeOpts(opts("unserved_messages",
		"Pending rows of streams no pipeline of this replica drains, as last sampled.")))
	m.unservedStreams = prometheus.NewGauge(prometheus.GaugeOpts(opts("unserved_streams",
		"Streams with pending rows that no pipeline of this replica drains, as last sampled.")))
	m.unservedOldest = prometheus.NewGauge(prometheus.GaugeOpts(opts("unserved_oldest_seconds",
		"How long the longest-waiting due row of an unserved stream has waited, as last sampled.")))
	cycles := prometheus.NewCounterVec(prometheus.CounterOpts(opts("janitor_cycles_total",
		"Janitor cycles by result: ran (this replica held the lock), skipped (another did), error.")), []string{"result"})
	for i, r := range janitorResults {
		m.janitorCycles[i] = cycles.WithLabelValues(r)
	}
	janitorDuration := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "janitor_cycle_duration_seconds",
		Help: "Time of one janitor cycle, whatever its result.", Buckets: janitorBuckets})
	m.janitorDuration = janitorDuration
	m.listenerReconnects = prometheus.NewCounter(prometheus.CounterOpts(opts("listener_reconnects_total",
		"Times the notification listener lost or could not make its connection (it reconnects; polling continues).")))
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("listener_connected",
		"1 while the notification listener holds a listening connection, else 0.")), m.listenerConnected)
	received := prometheus.NewCounterFunc(prometheus.CounterOpts(opts("notifications_received_total",
		"Notifications (LISTEN/NOTIFY) received from the outbox table.")), m.notificationsReceived)
	dbErrors := prometheus.NewCounterVec(prometheus.CounterOpts(opts("database_errors_total",
		"Database operations that failed, by operation: claim, write_back (after its retries), janitor (a cycle).")), []string{"operation"})
	for i, op := range dbOperations {
		m.dbErrors[i] = dbErrors.WithLabelValues(op)
	}

	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("build_info",
		"Always 1; labelled with the running build's version and Go version.")), []string{"version", "go_version"})
	version, goVersion := build.Version, build.GoVersion
	if version == "" {
		version = "unknown"
	}
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	buildInfo.WithLabelValues(version, goVersion).Set(1)
	streamInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("stream_info",
		"Always 1 per configured stream; labelled with the driver it is routed to.")), []string{"stream", "driver"})
	for _, s := range sortedKeys(streams) {
		streamInfo.WithLabelValues(s, streams[s]).Set(1)
	}
	driverInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("driver_info",
		"Always 1 per configured driver; labelled with its type.")), []string{"driver", "type"})
	for _, d := range sortedKeys(drivers) {
		driverInfo.WithLabelValues(d, drivers[d]).Set(1)
	}

	reg.MustRegister(m.leasesReclaimed, overdue, m.retentionDeleted, m.partitionsCreated, m.partitionsDropped,
		m.defaultPartitionRows, m.unservedMessages, m.unservedStreams, m.unservedOldest, cycles, janitorDuration, m.listenerReconnects, connected, received, dbErrors,
		buildInfo, streamInfo, driverInfo)
}

// ObserveListener makes outboxd_listener_connected and outboxd_notifications_received_total
// read l. Until it is called the first follows the listener's events and the second
// reads 0.
func (m *Metrics) ObserveListener(l ListenerStatus) {
	m.listener.Store(&l)
}

func (m *Metrics) listenerConnected() float64 {
	up := m.listenerUp.Load()
	if l := m.listener.Load(); l != nil {
		up = (*l).Connected()
	}
	if up {
		return 1
	}
	return 0
}

func (m *Metrics) notificationsReceived() float64 {
	if l := m.listener.Load(); l != nil {
		return float64((*l).Received())
	}
	return 0
}

// ObserveBus exposes, for each named subscriber of bus, the events it lost to a full
// queue (outboxd_event_bus_dropped_total) and the panics recovered from it
// (outboxd_event_bus_panics_total). The names are the subscriptions' own, fixed by the
// wiring. Only the first call counts; later ones do nothing.
func (m *Metrics) ObserveBus(bus BusCounters, subscribers ...string) {
	m.busOnce.Do(func() {
		m.reg.MustRegister(&busCollector{bus: bus, names: slices.Clone(subscribers)})
	})
}

var (
	busDroppedDesc = prometheus.NewDesc(namespace+"_event_bus_dropped_total",
		"Events an asynchronous bus subscriber lost because its queue was full (or shutdown cut its drain short).",
		[]string{"subscriber"}, nil)
	busPanicsDesc = prometheus.NewDesc(namespace+"_event_bus_panics_total",
		"Panics recovered from a bus subscriber.", []string{"subscriber"}, nil)
)

// busCollector reads the bus's counters at scrape time.
type busCollector struct {
	bus   BusCounters
	names []string
}

func (c *busCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- busDroppedDesc
	ch <- busPanicsDesc
}

func (c *busCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.names {
		ch <- prometheus.MustNewConstMetric(busDroppedDesc, prometheus.CounterValue, float64(c.bus.Dropped(n)), n)
		ch <- prometheus.MustNewConstMetric(busPanicsDesc, prometheus.CounterValue, float64(c.bus.Panics(n)), n)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
