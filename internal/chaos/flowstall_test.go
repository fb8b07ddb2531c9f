//go:build linux

package chaos_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// flowLockClass is the first key of a stream's flow lock ("obxf",
// migrations/0003_flow.up.sql), as pg_locks shows it in classid.
const flowLockClass = 0x6f627866

const (
	// flowStallShortest is the shortest stall: longer than flowStallBound, so that a lock
	// kept for the whole stall shows as latency past the bound.
	flowStallShortest = 15 * time.Second
	// flowStallBound is the longest a message committed during the stall may wait to
	// be delivered. The server ends the silent holder's session store.FlowLockIdle (3 s)
	// after the last statement it heard; the next insert of the stream notifies the
	// others, whose claim takes every row waiting; a publish takes at most
	// publish_timeout (2 s CI, 5 s full). 10 s leaves the rest for a loaded CI machine
	// and is far below what the other bounds would give: the stall's length (the
	// holder's path comes back) and poll_interval (60 s here).
	flowStallBound = 10 * time.Second
	// flowStallPoll is the scenario's poll_interval: long, so that only notifications
	// bring messages out quickly.
	flowStallPoll = 60 * time.Second
)

// flowingReplicaStalled stalls the database path of a replica that holds a stream's
// flow lock. While the lock is held, producers' inserts of the stream notify nobody, and
// the parked replicas would hear of those messages only at their next poll. A stalled
// path neither answers nor closes, so neither TCP keepalive (the proxy's kernel answers
// the probes) nor a closed socket frees the lock; the lock's session timeout must.
func flowingReplicaStalled() scenario {
	var (
		stalled  *replica
		streams  []string      // the streams whose flow lock it held when stalled
		released time.Duration // from the stall until the server freed its flow locks; 0: held throughout
		holders  string        // the holding sessions as the server saw them at the stall's end, if still held
		late     []int64       // rows leased to the stalled replica just after its path came back
	)
	return scenario{
		name: "flowing-replica-stalled",
		about: "stall the database path (bytes held, nothing closed) of the replica holding a flow lock while producers commit; " +
			"poll_interval 60s: the others must deliver what is committed meanwhile within seconds",
		tune: func(s *settings) {
			s.proxyPerReplica = true
			// The producers notify each stream about 20 times a second in the CI form:
			// a flow must start at that rate.
			s.flowRate = 5
			s.pollInterval = flowStallPoll
		},
		fault: func(w *world) error {
			stall := max(w.f.outage, flowStallShortest)
			var err error
			if stalled, streams, err = stallFlowHolder(w); err != nil {
				return err
			}
			w.note("%s stalled holding the flow lock of %s", stalled.id, strings.Join(streams, ", "))
			for time.Since(w.faultStart) < stall {
				held, err := w.flowHolders()
				if err != nil {
					return err
				}
				if len(held[stalled.id]) == 0 {
					released = time.Since(w.faultStart)
					break
				}
				if err := w.hold(50 * time.Millisecond); err != nil {
					return err
				}
			}
			if rest := stall - time.Since(w.faultStart); rest > 0 {
				if err := w.hold(rest); err != nil {
					return err
				}
			}
			if released == 0 {
				if holders, err = w.flowSessions(stalled.id); err != nil {
					return err
				}
			}
			w.dbProxy(stalled.slot).Restore()
			w.markFaultEnd()
			// A claim the stalled replica sent as the stall began, and gave up on at its
			// deadline, reaches the server now, late: it may lease rows committed during
			// the stall to a client that no longer waits for them. Those rows come out
			// when their lease expires (docs/operations.md), a lease TTL later: that is the
			// lease's bound, not the flow lock's, so they are left out of the latency.
			if err := w.hold(time.Second); err != nil {
				return err
			}
			if late, err = w.leasedBy(stalled.id); err != nil {
				return err
			}
			// The rows the stalled replica had leased are reclaimed by the janitors once
			// their lease expires, but nothing announces a reclaimed row: once production
			// ended they would wait for a 60 s poll. Producers go on for a lease and two
			// janitor cycles more, and their notifications bring those rows out too.
			return w.hold(w.set.leaseTTL + 2*w.set.janitorT)
		},
		expect: func(w *world, o *outcome) error {
			lat, err := w.deliveryLatency(w.faultStart, w.faultEnd, late)
			if err != nil {
				return err
			}
			stall := w.faultEnd.Sub(w.faultStart).Round(100 * time.Millisecond)
			if released > 0 {
				w.note("the server ended %s's flow lock session %s into the %s stall", stalled.id, released.Round(100*time.Millisecond), stall)
			} else {
				w.note("%s's flow lock was held for the whole %s stall", stalled.id, stall)
			}
			w.note("%d messages committed during the stall, %d delivered; commit to delivery: max %s, p99 %s (bound %s); "+
				"left out: %d leased to %s a second after its path came back", lat.committed, lat.delivered,
				lat.max.Round(10*time.Millisecond), lat.p99.Round(10*time.Millisecond), flowStallBound, lat.excluded, stalled.id)
			var errs []error
			if lat.committed == 0 {
				errs = append(errs, errors.New("nothing was committed during the stall: it proved nothing"))
			}
			if lat.max > flowStallBound {
				errs = append(errs, fmt.Errorf("a message committed during the stall took %s to be delivered; want at most %s",
					lat.max.Round(10*time.Millisecond), flowStallBound))
			}
			if released == 0 {
				errs = append(errs, fmt.Errorf("%s's flow lock outlived its %s stall; its sessions: %s", stalled.id, stall, holders))
			}
			return errors.Join(errs...)
		},
	}
}

// stallFlowHolder stalls the database proxy of a replica that holds a flow lock and
// returns it with the streams whose lock it holds once stalled (a replica whose flow
// ended between the look and the stall is restored and the attempt repeated).
func stallFlowHolder(w *world) (*replica, []string, error) {
	for attempt := 1; attempt <= 30; attempt++ {
		var holder *replica
		err := w.await("a replica to hold a flow lock", w.f.drainTimeout, func() (bool, error) {
			held, err := w.flowHolders()
			if err != nil {
				return false, err
			}
			for _, r := range w.live() {
				if len(held[r.id]) > 0 {
					holder = r
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return nil, nil, err
		}
		p := w.dbProxy(holder.slot)
		if p == w.pgProxy {
			return nil, nil, errors.New("the replicas share one database proxy: stalling it would stall them all (set proxyPerReplica)")
		}
		p.Stall()
		w.markFaultStart()
		held, err := w.flowHolders()
		if err != nil {
			p.Restore()
			return nil, nil, err
		}
		if s := held[holder.id]; len(s) > 0 {
			return holder, s, nil
		}
		p.Restore()
	}
	return nil, nil, errors.New("never caught a replica holding a flow lock in 30 stalls")
}

// flowHolders lists, by replica id, the streams whose flow lock a replica's session
// holds now.
func (w *world) flowHolders() (map[string][]string, error) {
	keys := make([]string, len(allStreams))
	for i, s := range allStreams {
		keys[i] = outboxName.FlowLockKey(s)
	}
	rows, err := w.pool.Query(w.ctx, `SELECT a.application_name, k.stream
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		JOIN unnest($2::text[], $3::text[]) AS k(stream, key) ON l.objid = hashtext(k.key)::oid
		WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock' AND l.classid = $1
		  AND a.datname = current_database()`, flowLockClass, allStreams, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, stream string
		if err := rows.Scan(&id, &stream); err != nil {
			return nil, err
		}
		out[id] = append(out[id], stream)
	}
	for _, s := range out {
		sort.Strings(s)
	}
	return out, rows.Err()
}

// latency is how long the messages committed in a span took to be delivered, from
// their insert to their acknowledgement, both on the database's clock.
type latency struct {
	committed, delivered int
	excluded             int // of those committed, left out
	max, p99             time.Duration
}

// deliveryLatency measures the messages inserted between from and to, but for those
// whose id is in except.
func (w *world) deliveryLatency(from, to time.Time, except []int64) (latency, error) {
	var l latency
	var maxS, p99S float64
	if except == nil {
		except = []int64{}
	}
	err := w.pool.QueryRow(w.ctx, `WITH span AS (
			SELECT *, id = ANY($3) AS left_out FROM `+outboxName.Qualified()+` WHERE created_at >= $1 AND created_at < $2)
		SELECT count(*), count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE left_out),
			coalesce(extract(epoch FROM max(published_at - created_at) FILTER (WHERE NOT left_out)), 0)::float8,
			coalesce(extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY published_at - created_at)
				FILTER (WHERE NOT left_out)), 0)::float8
		FROM span`, from, to, except).
		Scan(&l.committed, &l.delivered, &l.excluded, &maxS, &p99S)
	l.max, l.p99 = time.Duration(maxS*float64(time.Second)), time.Duration(p99S*float64(time.Second))
	return l, err
}

// flowSessions describes the sessions of replica id that hold a flow lock as the server
// sees them: state, how long in it, the idle limit the lock should have set (shown only
// by the session itself, so read from the last statement), and that last statement.
func (w *world) flowSessions(id string) (string, error) {
	rows, err := w.pool.Query(w.ctx, `SELECT a.pid, a.state, round(extract(epoch FROM now() - a.state_change)::numeric, 1),
			coalesce(a.wait_event, ''), a.query
		FROM pg_stat_activity a
		WHERE a.application_name = $1 AND a.datname = current_database()
		  AND EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted AND l.classid = $2)`,
		id, flowLockClass)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			pid            int32
			state, wait, q string
			since          float64
		)
		if err := rows.Scan(&pid, &state, &since, &wait, &q); err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("pid %d %s for %.1fs (wait %q), last statement %q", pid, state, since, wait, q))
	}
	return strings.Join(out, "; "), rows.Err()
}
