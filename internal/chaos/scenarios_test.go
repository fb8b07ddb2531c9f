//go:build linux

package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/internal/testenv"
)

// scenarios are the suite, in the order the table lists them.
func scenarios() []scenario {
	return []scenario{
		killMidBatch(),
		brokerStopped("kafka"),
		brokerStopped("jetstream"),
		postgresRestarted(),
		databaseCut(),
		listenerDropped(),
		brokerStalledPastLease(),
		replicaStoppedPastLease(),
		migrateRace(),
		jetstreamFull(),
		deadLetterDown(),
		orderedUnderFaults(),
		flowingReplicaStalled(),
	}
}

func killMidBatch() scenario {
	var held int
	return scenario{
		name: "kill-9-mid-batch",
		about: "SIGKILL a replica while it holds claimed rows (the default claim mode: row locks in open transactions); " +
			"a new process takes its slot after the outage",
		fault: func(w *world) error {
			n, err := killHoldingClaims(w, "r2")
			if err != nil {
				return err
			}
			held = n
			w.markFaultStart()
			w.note("r2 was killed holding %d claim transactions", n)
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			w.waitReady(w.startReplica("r2", false, ""))
			return nil
		},
		expect: func(w *world, o *outcome) error {
			// The server ended r2's transactions with its connections: its rows were
			// pending again at once, with no lease for a janitor to reclaim.
			if err := w.scrapeAll(); err != nil {
				return err
			}
			reclaimed := w.total("outboxd_leases_reclaimed_total")
			w.note("leases reclaimed by the janitors: %.0f (none to reclaim in transaction mode)", reclaimed)
			n, err := w.claimsHeldBy("r2")
			if err != nil {
				return err
			}
			if held > 0 && n > 0 {
				return fmt.Errorf("r2's new process holds %d claims at the end of the drain", n)
			}
			return nil
		},
	}
}

// killHoldingClaims SIGKILLs slot's process at a moment it holds claims in open
// transactions, and returns how many it held. A process that committed its batches
// between the look and the kill is replaced and the attempt repeated.
func killHoldingClaims(w *world, slot string) (int, error) {
	for attempt := 1; attempt <= 30; attempt++ {
		r := w.replica(slot)
		var held int
		err := w.await(r.id+" to hold claimed rows", w.f.drainTimeout, func() (bool, error) {
			n, err := w.claimsHeldBy(r.id)
			held = n
			return n > 0, err
		})
		if err != nil {
			return 0, err
		}
		if err := r.kill(); err != nil {
			return 0, err
		}
		if held > 0 {
			return held, nil
		}
		w.waitReady(w.startReplica(slot, false, ""))
	}
	return 0, fmt.Errorf("never caught %s holding claims in 30 kills", slot)
}

// killHoldingLeases SIGKILLs slot's process at a moment it holds leased rows, and
// returns how many it held. A process that wrote its batch back between the look and
// the kill is replaced and the attempt repeated.
func killHoldingLeases(w *world, slot string) (int, error) {
	for attempt := 1; attempt <= 30; attempt++ {
		r := w.replica(slot)
		err := w.await(r.id+" to hold leased rows", w.f.drainTimeout, func() (bool, error) {
			ids, err := w.leasedBy(r.id)
			return len(ids) > 0, err
		})
		if err != nil {
			return 0, err
		}
		if err := r.kill(); err != nil {
			return 0, err
		}
		ids, err := w.leasedBy(r.id)
		if err != nil {
			return 0, err
		}
		if len(ids) > 0 {
			return len(ids), nil
		}
		w.waitReady(w.startReplica(slot, false, ""))
	}
	return 0, fmt.Errorf("never caught %s holding leases in 30 kills", slot)
}

func brokerStopped(which string) scenario {
	stream := map[string]string{"kafka": streamOrders, "jetstream": streamShipments}[which]
	return scenario{
		name:  which + "-stopped",
		about: "stop the " + which + " broker for the outage and start it again (same port, same data)",
		fault: func(w *world) error {
			stop, start := w.kafka.Stop, w.kafka.Start
			if which == "jetstream" {
				stop, start = w.js.Stop, w.js.Start
			}
			stop()
			w.markFaultStart()
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			start()
			return nil
		},
		expect: func(w *world, o *outcome) error {
			deferred := w.total("outboxd_messages_deferred_total", `stream="`+stream+`"`)
			opened := w.total("outboxd_breaker_transitions_total", `stream="`+stream+`"`, `state="open"`)
			w.note("%s messages deferred while the broker was down: %.0f; breaker openings: %.0f", stream, deferred, opened)
			if deferred == 0 {
				return fmt.Errorf("no %s message was deferred: the outage was not felt", stream)
			}
			return nil
		},
	}
}

func postgresRestarted() scenario {
	return scenario{
		name:      "postgres-restarted",
		about:     "stop PostgreSQL (fast shutdown) for the outage and start it again",
		ownServer: true,
		fault: func(w *world) error {
			ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
			defer cancel()
			if err := w.db.server.Stop(ctx, testenv.ShutdownFast); err != nil {
				return err
			}
			w.markFaultStart()
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			return w.db.server.Start(ctx)
		},
		expect: expectDatabaseLost,
	}
}

// expectDatabaseLost holds when the replicas noticed the database was gone.
func expectDatabaseLost(w *world, o *outcome) error {
	dbErrors := w.total("outboxd_database_errors_total")
	reconnects := w.total("outboxd_listener_reconnects_total")
	w.note("database errors counted: %.0f; listener reconnects: %.0f", dbErrors, reconnects)
	if dbErrors == 0 || reconnects == 0 {
		return errors.New("the replicas never noticed the database was gone")
	}
	return nil
}

func databaseCut() scenario {
	return scenario{
		name:  "database-cut",
		about: "cut every connection between the replicas and PostgreSQL (proxy) for the outage, then restore",
		fault: func(w *world) error {
			w.pgProxy.Cut()
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			w.pgProxy.Restore()
			return nil
		},
		expect: expectDatabaseLost,
	}
}

func listenerDropped() scenario {
	const drops = 3
	return scenario{
		name:  "listener-dropped",
		about: "terminate every replica's LISTEN backend (pg_terminate_backend) three times; polling is slowed so lost wake-ups show",
		tune:  func(s *settings) { s.pollInterval = 2 * time.Second },
		fault: func(w *world) error {
			for i := 0; i < drops; i++ {
				if err := dropListeners(w); err != nil {
					return err
				}
				if err := w.hold(w.f.outage / drops); err != nil {
					return err
				}
			}
			return nil
		},
		expect: func(w *world, o *outcome) error {
			reconnects := w.total("outboxd_listener_reconnects_total")
			w.note("listener reconnects: %.0f", reconnects)
			if reconnects < drops*float64(w.set.replicas) {
				return fmt.Errorf("%.0f listener reconnects; want at least %d", reconnects, drops*w.set.replicas)
			}
			return nil
		},
	}
}

// dropListeners terminates the LISTEN backend of every live replica and waits until
// each has reconnected.
func dropListeners(w *world) error {
	live := w.live()
	before := map[*replica]float64{}
	for _, r := range live {
		m, err := r.scrape(w.ctx)
		if err != nil {
			return err
		}
		before[r] = m.sum("outboxd_listener_reconnects_total")
	}
	var pids []int32
	err := w.await("every replica to listen", time.Minute, func() (bool, error) {
		rows, err := w.pool.Query(w.ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
			  AND query ILIKE 'LISTEN %' AND pid <> pg_backend_pid()`)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		pids = pids[:0]
		for rows.Next() {
			var pid int32
			if err := rows.Scan(&pid); err != nil {
				return false, err
			}
			pids = append(pids, pid)
		}
		return len(pids) >= len(live), rows.Err()
	})
	if err != nil {
		return err
	}
	if _, err := w.pool.Exec(w.ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		return err
	}
	return w.await("every replica's listener to reconnect", time.Minute, func() (bool, error) {
		for _, r := range live {
			m, err := r.scrape(w.ctx)
			if err != nil {
				return false, err
			}
			if m.sum("outboxd_listener_reconnects_total") <= before[r] || m.sum("outboxd_listener_connected") != 1 {
				return false, nil
			}
		}
		return true, nil
	})
}

func brokerStalledPastLease() scenario {
	return scenario{
		name:  "kafka-stalled-past-lease",
		about: "the Kafka proxy holds every byte for 1.5 lease TTLs: publishes time out, the broker stores them late",
		fault: func(w *world) error {
			w.kafkaProxy.Stall()
			if err := w.hold(w.set.leaseTTL * 3 / 2); err != nil {
				return err
			}
			w.kafkaProxy.Restore()
			return nil
		},
		expect: func(w *world, o *outcome) error {
			errs := w.total("outboxd_broker_errors_total", `driver="kafka"`)
			retried := w.total("outboxd_messages_retried_total", `stream="orders"`)
			w.note("Kafka publish errors: %.0f; orders retried: %.0f", errs, retried)
			if errs == 0 {
				return errors.New("no Kafka publish failed: the stall was not felt")
			}
			return nil
		},
	}
}

func replicaStoppedPastLease() scenario {
	var (
		held      []int64
		heldBy    map[string]int // of held, rows per lease token
		takenOver int            // of held, the rows another replica wrote back
		before    metricsSample
		stopped   *replica
		resumed   time.Time
	)
	return scenario{
		// Leases expire; transactions do not wait for that (the server ends an idle
		// one after the lease TTL and the rows are pending at once, nothing to reclaim).
		// The scenario is the lease mode's, so its streams claim by lease.
		tune: func(s *settings) { s.claim = "lease" },
		name: "replica-stopped-past-lease",
		about: "SIGSTOP a replica holding leased rows until its leases expired, were reclaimed and delivered by the others; " +
			"then SIGCONT: its stale write-backs must change nothing",
		fault: func(w *world) error {
			var err error
			if stopped, held, before, err = stopHoldingLeases(w, "r2"); err != nil {
				return err
			}
			if heldBy, err = rowsPerToken(w, held); err != nil {
				return err
			}
			w.markFaultStart()
			// Its leases expire, another replica's janitor reclaims them, and the
			// others deliver the rows.
			err = w.await("the others to take over r2's rows", w.set.leaseTTL+w.f.drainTimeout, func() (bool, error) {
				var open int
				err := w.pool.QueryRow(w.ctx, `SELECT count(*) FROM `+outboxName.Qualified()+
					` WHERE id = ANY($1) AND status IN ('pending', 'leased')`, held).Scan(&open)
				return open == 0, err
			})
			if err != nil {
				return err
			}
			// A write-back r2 sent just before the stop may have landed after all;
			// only the rows another replica wrote back were taken over.
			err = w.pool.QueryRow(w.ctx, `SELECT count(*) FROM `+outboxName.Qualified()+
				` WHERE id = ANY($1) AND owner <> $2`, held, stopped.id).Scan(&takenOver)
			if err != nil {
				return err
			}
			w.note("r2 was stopped for %s holding %d leased rows; the others took over %d of them",
				time.Since(w.faultStart).Round(100*time.Millisecond), len(held), takenOver)
			resumed = time.Now()
			if err := stopped.signal(contSignal); err != nil {
				return err
			}
			// What a harness reading r2's counters right away would see: its stale
			// batches have not written back yet.
			if early, err := stopped.scrape(w.ctx); err == nil {
				w.note("r2's lease conflicts read right after SIGCONT: %.0f (its stale write-backs had not run yet)",
					early.sum("outboxd_lease_conflicts_total")-before.sum("outboxd_lease_conflicts_total"))
			}
			return nil
		},
		checks: []func(w *world) check{func(w *world) check {
			ids := map[int64]bool{}
			for _, id := range held {
				ids[id] = true
			}
			return &duplicatesAmong{ids: ids}
		}},
		expect: func(w *world, o *outcome) error {
			after := stopped.lastSample()
			conflicts := int(after.sum("outboxd_lease_conflicts_total") - before.sum("outboxd_lease_conflicts_total"))
			wb, err := failedWriteBacks(stopped.log, resumed)
			if err != nil {
				return err
			}
			// A claim whose own deadline abandoned it may have run all the same: r2
			// never knew those rows, so it writes nothing back for them. It names the
			// claim's token; count the held rows leased under it. Read the whole log:
			// the claim may have been one r2 had sent when it stopped (abandoned on
			// SIGCONT) or one abandoned before the stop on a loaded machine, whose
			// rows were still leased to r2 when it was caught.
			abandoned, err := abandonedClaims(stopped.log)
			if err != nil {
				return err
			}
			unknown := 0
			for _, token := range abandoned {
				unknown += heldBy[token]
			}
			if unknown > 0 {
				w.note("%d of the rows r2 held came from a claim it abandoned at its deadline once resumed: nothing to write back", unknown)
			}
			w.t.Logf("r2's warnings and errors after SIGCONT:\n%s", logSince(stopped.log, resumed.Add(-time.Second)))
			w.note("after its write-backs finished, r2 counted %d lease conflicts for the %d rows it had held; "+
				"write-backs it reported failed: %d rows never sent (deadline passed while stopped), %d rows sent with the answer lost",
				conflicts, len(held), wb.neverSent, wb.answerLost)
			if conflicts < takenOver {
				w.note("lease conflicts undercounted by %d: a write-back whose deadline passed while the replica was stopped "+
					"is reported as a database error, not as a lease conflict (finding F1 in docs/chaos.md)", takenOver-conflicts)
			}
			// Each stale write-back of a row the others took over must have been
			// refused or not made at all. Fewer would mean a stale write changed a row
			// another replica owned.
			if conflicts+wb.neverSent+wb.answerLost+unknown < takenOver {
				return fmt.Errorf("the others took over %d rows r2 held, but only %d of its write-backs were refused, %d not made "+
					"and %d held by claims it abandoned", takenOver, conflicts, wb.neverSent+wb.answerLost, unknown)
			}
			return nil
		},
	}
}

// stopHoldingLeases SIGSTOPs slot's process while it holds leased rows and returns the
// rows it holds once stopped, with its metrics just before the stop. A statement it
// sent before the stop still runs to its end, so the rows counted are those still
// leased to it once its backends have gone quiet. A stop may catch it holding the
// janitor's lock: since finding F3's fix the others reclaim its leases all the same.
func stopHoldingLeases(w *world, slot string) (*replica, []int64, metricsSample, error) {
	for attempt := 1; attempt <= 30; attempt++ {
		r := w.replica(slot)
		err := w.await(r.id+" to hold leased rows", w.f.drainTimeout, func() (bool, error) {
			ids, err := w.leasedBy(r.id)
			return len(ids) > 0, err
		})
		if err != nil {
			return nil, nil, nil, err
		}
		before, err := r.scrape(w.ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := r.signal(stopSignal); err != nil {
			return nil, nil, nil, err
		}
		if err := w.awaitQuiet(r.id); err != nil {
			return nil, nil, nil, err
		}
		locked, err := w.holdsJanitorLock(r.id)
		if err != nil {
			return nil, nil, nil, err
		}
		ids, err := w.leasedBy(r.id)
		if err != nil {
			return nil, nil, nil, err
		}
		if len(ids) > 0 {
			if locked {
				w.note("%s was stopped holding the janitor's lock", r.id)
			}
			return r, ids, before, nil
		}
		if err := r.signal(contSignal); err != nil {
			return nil, nil, nil, err
		}
	}
	return nil, nil, nil, fmt.Errorf("never caught %s holding leases in 30 stops", slot)
}

// awaitQuiet waits until none of the replica's backends runs a statement, twice in a
// row 50ms apart: a statement it sent just before a stop still runs to its end and may
// change the rows it names.
func (w *world) awaitQuiet(id string) error {
	quiet := 0
	return w.await(id+"'s statements to finish", 30*time.Second, func() (bool, error) {
		var n int
		err := w.pool.QueryRow(w.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND state = 'active'`, id).Scan(&n)
		if err != nil || n > 0 {
			quiet = 0
			return false, err
		}
		quiet++
		if quiet < 2 {
			time.Sleep(50 * time.Millisecond)
		}
		return quiet >= 2, nil
	})
}

// janitorLockClass is the first key of the janitor's two-key advisory lock ("obxd",
// store/housekeeping.go), as pg_locks shows it in classid.
const janitorLockClass = 0x6f627864

// holdsJanitorLock reports whether one of the replica's backends holds the janitor's
// advisory lock.
func (w *world) holdsJanitorLock(id string) (bool, error) {
	var n int
	err := w.pool.QueryRow(w.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $2
		  AND a.datname = current_database() AND a.application_name = $1`, id, janitorLockClass).Scan(&n)
	return n > 0, err
}

// writeBackFailures adds up the rows of the write-backs a replica logged as failed.
type writeBackFailures struct {
	neverSent  int // the context had ended before the statement was sent
	answerLost int // sent; the answer did not come back in time (it may have run)
}

// failedWriteBacks reads a replica's log for failed write-backs since since.
func failedWriteBacks(log string, since time.Time) (writeBackFailures, error) {
	var out writeBackFailures
	f, err := os.Open(log)
	if err != nil {
		return out, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), "write-back failed; rows stay leased") {
			continue
		}
		var rec struct {
			Time time.Time `json:"time"`
			Rows int       `json:"rows"`
			Err  string    `json:"err"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Time.Before(since) {
			continue
		}
		if strings.Contains(rec.Err, "timeout:") {
			out.answerLost += rec.Rows
		} else {
			out.neverSent += rec.Rows
		}
	}
	return out, sc.Err()
}

// rowsPerToken counts ids by the lease token each is leased under now.
func rowsPerToken(w *world, ids []int64) (map[string]int, error) {
	rows, err := w.pool.Query(w.ctx, `SELECT lease_token::text, count(*) FROM `+outboxName.Qualified()+
		` WHERE id = ANY($1) AND lease_token IS NOT NULL GROUP BY 1`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var token string
		var n int
		if err := rows.Scan(&token, &n); err != nil {
			return nil, err
		}
		out[token] = n
	}
	return out, rows.Err()
}

// abandonedClaims reads a replica's log for the tokens of the claims it abandoned at
// their deadline.
func abandonedClaims(log string) ([]string, error) {
	raw, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, "claim abandoned at its deadline") {
			continue
		}
		var rec struct {
			Token string `json:"lease_token"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Token != "" {
			out = append(out, rec.Token)
		}
	}
	return out, nil
}

// logSince returns the warnings and errors a replica logged since since.
func logSince(log string, since time.Time) string {
	raw, err := os.ReadFile(log)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		var rec struct {
			Time  time.Time `json:"time"`
			Level string    `json:"level"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && !rec.Time.Before(since) && rec.Level != "INFO" {
			out = append(out, "  "+line)
		}
	}
	return strings.Join(out, "\n")
}

// duplicatesAmong counts, per destination, the extra copies of a set of messages.
type duplicatesAmong struct {
	ids  map[int64]bool
	seen map[string]map[int64]int
}

func (c *duplicatesAmong) observe(a arrival, m *produced) {
	if !c.ids[a.ID] {
		return
	}
	if c.seen == nil {
		c.seen = map[string]map[int64]int{}
	}
	dest, _, _ := strings.Cut(a.Dest, "/")
	if c.seen[dest] == nil {
		c.seen[dest] = map[int64]int{}
	}
	c.seen[dest][a.ID]++
}

func (c *duplicatesAmong) finish(o *outcome) error {
	var parts []string
	for dest, ids := range c.seen {
		dups := 0
		for _, n := range ids {
			dups += n - 1
		}
		parts = append(parts, fmt.Sprintf("%s %d", dest, dups))
	}
	o.Notes = append(o.Notes, fmt.Sprintf("duplicates among the %d rows r2 held: %s", len(c.ids), strings.Join(parts, ", ")))
	return nil
}

func migrateRace() scenario {
	return scenario{
		name:    "migrate-race",
		about:   "two replicas released at the same instant on an empty database, both with --migrate",
		emptyDB: true,
		tune:    func(s *settings) { s.replicas = 2 },
		fault: func(w *world) error {
			gate := filepath.Join(w.dir, "start-gate")
			if err := syscall.Mkfifo(gate, 0o600); err != nil {
				return err
			}
			a := w.startReplica("r1", true, gate)
			b := w.startReplica("r2", true, gate)
			// Both shells must be blocked opening the FIFO before it is opened for
			// writing, which releases them together.
			waiting := func(r *replica) bool {
				raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", r.pid()))
				if wchan := string(raw); err == nil && wchan != "" && wchan != "0" {
					return strings.Contains(wchan, "partner") || strings.Contains(wchan, "fifo")
				}
				// No wait channel shown (a kernel without it): asleep is the best sign.
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid()))
				_, rest, _ := strings.Cut(string(stat), ") ")
				return err == nil && strings.HasPrefix(rest, "S")
			}
			if err := w.await("both replicas to wait at the gate", 30*time.Second, func() (bool, error) {
				return waiting(a) && waiting(b), nil
			}); err != nil {
				return err
			}
			f, err := os.OpenFile(gate, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			w.markFaultStart()
			if err := f.Close(); err != nil {
				return err
			}
			w.waitReady(a)
			w.waitReady(b)
			return nil
		},
		expect: func(w *world, o *outcome) error {
			var version int
			var dirty bool
			err := w.pool.QueryRow(w.ctx, `SELECT version, dirty FROM outbox.messages_schema_migrations`).Scan(&version, &dirty)
			if err != nil {
				return err
			}
			w.note("schema at version %d (dirty %v) after both migrated", version, dirty)
			if dirty {
				return errors.New("the schema is dirty after two concurrent migrations")
			}
			return nil
		},
	}
}

func jetstreamFull() scenario {
	return scenario{
		name:  "jetstream-full",
		about: "SHIPMENTS reaches its max_bytes (discard new) and refuses writes for the outage; then its limit is raised",
		tune:  func(s *settings) { s.jsLimitFraction = 0.4 },
		fault: func(w *world) error {
			nc, err := natsgo.Connect(w.js.URL())
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			s, err := js.Stream(w.ctx, jsStream)
			if err != nil {
				return err
			}
			var bytes uint64
			err = w.await("SHIPMENTS to fill up", w.f.drainTimeout, func() (bool, error) {
				info, err := s.Info(w.ctx)
				if err != nil {
					return false, err
				}
				bytes = info.State.Bytes
				per := uint64(w.jsLimit) / uint64(max(1, info.State.Msgs))
				return bytes+2*per > uint64(w.jsLimit), nil
			})
			if err != nil {
				return err
			}
			w.markFaultStart()
			w.note("SHIPMENTS full at %d of %d bytes", bytes, w.jsLimit)
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			cfg := s.CachedInfo().Config
			cfg.MaxBytes = -1
			_, err = js.UpdateStream(w.ctx, cfg)
			return err
		},
		expect: func(w *world, o *outcome) error {
			retried := w.total("outboxd_messages_retried_total", `stream="shipments"`)
			failed := w.total("outboxd_messages_failed_total", `stream="shipments"`)
			w.note("shipments refused and retried: %.0f; failed for good: %.0f", retried, failed)
			if retried == 0 {
				return errors.New("no shipment was refused: the full stream was not felt")
			}
			return nil
		},
	}
}

func deadLetterDown() scenario {
	return scenario{
		name: "dead-letter-down",
		about: "messages bound for a Kafka topic that does not exist fail for good while the dead-letter " +
			"destination (JetStream, own proxy) is cut; each must reach it once it is back",
		tune: func(s *settings) {
			// Few enough that the in-memory dead-letter queues (1024 per stream and
			// replica) never overflow, whatever the form: a full queue drops copies
			// by design (docs/contract.md).
			s.deadLetterEvery = max(10, s.messages/len(allStreams)/600)
		},
		fault: func(w *world) error {
			w.dlqProxy.Cut()
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			w.dlqProxy.Restore()
			return nil
		},
		expect: func(w *world, o *outcome) error {
			retried := w.total("outboxd_dead_letter_forwards_total", `result="retried"`)
			forwarded := w.total("outboxd_dead_letter_forwards_total", `result="forwarded"`)
			gaveUp := w.total("outboxd_dead_letter_forwards_total", `result="gave_up"`)
			dropped := w.total("outboxd_event_bus_dropped_total")
			w.note("dead letters forwarded %.0f, forwarding attempts retried %.0f, given up %.0f, dropped by the bus %.0f",
				forwarded, retried, gaveUp, dropped)
			if retried == 0 {
				return errors.New("no dead-letter forwarding failed: the outage was not felt")
			}
			return nil
		},
	}
}
