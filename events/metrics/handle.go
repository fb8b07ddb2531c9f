package metrics

import (
	"github.com/outboxd/outboxd/events"
	"time"
)

// Handle turns one event into series. It is meant for a synchronous subscription, where
// it sees every event and never drops one:
//
//	bus.Subscribe("metrics", m.Handle)
//
// It never blocks and, for streams in the configuration, allocates nothing.
func (m *Metrics) Handle(e events.Event) {
	switch e := e.(type) {
	case events.Iteration:
		m.iteration(&e)
	case events.ClaimFailed:
		m.dbErrors[opClaim].Inc()
	case events.BreakerChanged:
		m.breaker(e)
	case events.FlowChanged:
		if s, ok := m.streams[e.Stream]; ok {
			flowing := 0.0
			if e.Flowing {
				flowing = 1
			}
			s.flowing.Set(flowing)
		}
	case events.Backlog:
		m.backlog(e)
	case events.BlockedKeys:
		if s, ok := m.streams[e.Stream]; ok { // a gauge of an unconfigured stream would have no meaning
			s.blockedKeys.Set(float64(e.Keys))
			s.blockedMessages.Set(float64(e.Waiting))
		}
	case events.ReplayProgress:
		if s, ok := m.streams[e.Stream]; ok {
			s.replaysRunning.Set(float64(e.Running))
			s.replayRemaining.Set(float64(e.Remaining))
			if seen := s.replayedSeen.Swap(e.Copied); e.Copied > seen {
				s.replayed.Add(float64(e.Copied - seen))
			}
		}
	case events.UnservedStreams:
		var pending int64
		var oldest time.Duration
		for _, u := range e.Streams {
			pending += u.Pending
			oldest = max(oldest, u.Oldest)
		}
		m.unservedMessages.Set(float64(pending))
		m.unservedStreams.Set(float64(len(e.Streams)))
		m.unservedOldest.Set(oldest.Seconds())
	case events.ListenerState:
		m.listenerUp.Store(e.Connected)
		if !e.Connected {
			m.listenerReconnects.Inc()
		}
	case events.DeadLetterForwarded:
		s := m.series(e.Stream)
		if i := indexOf(deadLetterResult, string(e.Result)); i >= 0 {
			s.deadLetter[i].Inc()
		} else {
			m.v.deadLetter.WithLabelValues(s.name, other).Inc()
		}
	case events.MessageExpired:
		m.series(e.Stream).expired.Inc()
	case events.LeasesReclaimed:
		m.leasesReclaimed.Add(float64(e.Count))
		for _, d := range e.Overdue {
			m.leaseOverdue.Observe(d.Seconds())
		}
	case events.RetentionSwept:
		m.retentionDeleted.Add(float64(e.Deleted))
	case events.PartitionChanged:
		if e.Created {
			m.partitionsCreated.Inc()
		} else {
			m.partitionsDropped.Inc()
		}
	case events.DefaultPartitionRows:
		m.defaultPartitionRows.Set(float64(e.Rows))
	case events.JanitorCycle:
		m.janitorDuration.Observe(e.Duration.Seconds())
		switch {
		case e.Err != nil:
			m.janitorCycles[janitorError].Inc()
			m.dbErrors[opJanitor].Inc()
		case e.Skipped:
			m.janitorCycles[janitorSkipped].Inc()
		default:
			m.janitorCycles[janitorRan].Inc()
		}
	}
	// MessageFailed is counted by its Iteration (messages_failed_total); anything else
	// has no series.
}

func (m *Metrics) iteration(e *events.Iteration) {
	s := m.series(e.Stream)
	s.claimed.Add(float64(e.Claimed))
	s.published.Add(float64(e.Published))
	s.retried.Add(float64(e.Retried))
	s.deferred.Add(float64(e.Deferred))
	s.released.Add(float64(e.Released))
	s.leaseConflicts.Add(float64(e.LeaseConflicts))
	s.heldBack.Add(float64(e.HeldBack))
	s.orderViolations.Add(float64(e.OrderViolations))
	s.duplicates.Add(float64(e.Duplicates))
	for reason, n := range e.FailReasons {
		if i := indexOf(failReasons, reason); i >= 0 {
			s.failed[i].Add(float64(n))
		} else {
			m.v.failed.WithLabelValues(s.name, other).Add(float64(n))
		}
	}
	for kind, n := range e.ErrorKinds {
		if i := indexOf(brokerErrorKinds, kind); i >= 0 {
			s.brokerErrors[i].Add(float64(n))
		} else {
			m.v.brokerErrors.WithLabelValues(s.driver, other).Add(float64(n))
		}
	}
	for _, d := range e.DeliveryLags {
		s.lag.Observe(d.Seconds())
	}
	s.batch.Observe(float64(e.Claimed))
	s.publish.Observe(e.Publish.Seconds())
	s.iteration.Observe((e.Claim + e.Publish + e.WriteBack).Seconds())
	if e.Err != nil {
		m.dbErrors[opWriteBack].Inc()
	}
}

func (m *Metrics) breaker(e events.BreakerChanged) {
	s := m.series(e.Stream)
	if s.paused != nil { // nil for "_other"
		paused := 0.0
		if e.To != events.BreakerClosed {
			paused = 1
		}
		s.paused.Set(paused)
	}
	if i := indexOf(breakerStates, string(e.To)); i >= 0 {
		s.breakerTransitions[i].Inc()
	} else {
		m.v.breakerTransitions.WithLabelValues(s.name, other).Inc()
	}
}

func (m *Metrics) backlog(e events.Backlog) {
	s, ok := m.streams[e.Stream]
	if !ok {
		return // a gauge of an unconfigured stream would have no meaning
	}
	// The sample's deferred rows are pending rows too; the series split them so that
	// the statuses add up to the backlog.
	s.backlog[statusPending].Set(float64(max(e.Pending-e.Deferred, 0)))
	s.backlog[statusDeferred].Set(float64(e.Deferred))
	s.backlog[statusLeased].Set(float64(e.Leased))
	s.backlog[statusFailed].Set(float64(e.Failed))
	s.oldestAge.Set(e.OldestPendingAge.Seconds())
}

// series returns the stream's series, or those of "_other" for a stream outside the
// configuration.
func (m *Metrics) series(stream string) *streamSeries {
	if s, ok := m.streams[stream]; ok {
		return s
	}
	m.otherOnce.Do(func() { m.others = m.resolve(other, other) })
	return m.others
}

func indexOf(vocabulary []string, v string) int {
	for i, w := range vocabulary {
		if w == v {
			return i
		}
	}
	return -1
}
