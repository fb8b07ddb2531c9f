//go:build linux

package chaos_test

import (
	"fmt"
	"strings"
	"testing"
)

// orderedUnderFaults is the ordered-stream scenario of docs/ordering.md: every stream
// ordered, 1,000 keys, a replica stopped past its lease while the others take its rows
// over, another killed holding leases, and the Kafka broker stopped meanwhile.
// Besides at-least-once, the first arrival of each key's messages must follow the
// order the key's producer committed them in.
func orderedUnderFaults() scenario {
	return scenario{
		name: "ordered-kill-outage-lease",
		about: "ordered streams over 1,000 keys: SIGSTOP a replica past its lease, SIGKILL another holding leases, " +
			"stop Kafka for the outage; first arrivals per key must be in commit order",
		tune: func(s *settings) {
			s.ordered = true
			s.keys = 1000
		},
		fault: func(w *world) error {
			// The faults overlap, so that each lands while messages still flow: r1 is
			// stopped holding leases, r2 killed holding leases, then Kafka stopped; r1
			// resumes only once the others delivered what it held.
			stopped, held, _, err := stopHoldingLeases(w, "r1")
			if err != nil {
				return err
			}
			w.markFaultStart()
			n, err := killHoldingLeases(w, "r2")
			if err != nil {
				return err
			}
			w.note("r1 was stopped holding %d leased rows; r2 was killed holding %d", len(held), n)
			w.kafka.Stop()
			if err := w.hold(w.f.outage); err != nil {
				return err
			}
			w.kafka.Start()
			w.waitReady(w.startReplica("r2", false, ""))
			err = w.await("the others to take over r1's rows", w.set.leaseTTL+w.f.drainTimeout, func() (bool, error) {
				var open int
				err := w.pool.QueryRow(w.ctx, `SELECT count(*) FROM `+outboxName.Qualified()+
					` WHERE id = ANY($1) AND (status IN ('pending', 'leased') OR owner = $2)`, held, stopped.id).Scan(&open)
				return open == 0, err
			})
			if err != nil {
				return err
			}
			return stopped.signal(contSignal)
		},
		checks: []func(w *world) check{func(w *world) check { return &keyOrder{last: map[string]int{}, seen: map[int64]bool{}} }},
		expect: func(w *world, o *outcome) error {
			if v := w.total("outboxd_order_violations_total"); v > 0 {
				return fmt.Errorf("the replicas counted %.0f order violations", v)
			}
			return nil
		},
	}
}

// keyOrder checks that, per destination and key, the first arrival of each message
// comes in the order the key's messages were committed (produced.Seq). A repeat of a
// message already seen (at-least-once re-publication) is allowed anywhere.
type keyOrder struct {
	last       map[string]int // dest + key → Seq of the latest first arrival
	seen       map[int64]bool
	keys       map[string]bool
	violations int
	examples   []string
}

func (c *keyOrder) observe(a arrival, m *produced) {
	if m == nil || a.DeadLetter || c.seen[a.ID] {
		return
	}
	c.seen[a.ID] = true
	k := a.Dest + "\x00" + m.Key
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	c.keys[m.Key] = true
	if prev, ok := c.last[k]; ok && m.Seq < prev {
		c.violations++
		if len(c.examples) < 10 {
			c.examples = append(c.examples, fmt.Sprintf("%s key %s: message %d (#%d of its key) arrived first after #%d",
				a.Dest, m.Key, m.ID, m.Seq, prev))
		}
		return
	}
	c.last[k] = m.Seq
}

func (c *keyOrder) finish(o *outcome) error {
	o.Notes = append(o.Notes, fmt.Sprintf("order checked over %d keys and %d messages: %d first arrivals out of order",
		len(c.keys), len(c.seen), c.violations))
	if c.violations > 0 {
		return fmt.Errorf("%d first arrivals out of key order, for example:\n%s", c.violations, strings.Join(c.examples, "\n"))
	}
	return nil
}

func TestKeyOrderFindsAFirstArrivalOutOfOrderAndAllowsRepeats(t *testing.T) {
	a1 := &produced{ID: 1, Key: "k", Seq: 0}
	a2 := &produced{ID: 2, Key: "k", Seq: 1}
	b1 := &produced{ID: 3, Key: "other", Seq: 0}
	arrive := func(c *keyOrder, ms ...*produced) {
		for i, m := range ms {
			c.observe(arrival{Dest: "kafka orders/0", Seq: int64(i), ID: m.ID, Key: m.Key}, m)
		}
	}
	ok := &keyOrder{last: map[string]int{}, seen: map[int64]bool{}}
	arrive(ok, a1, b1, a2, a1, a2) // in order, then a re-publication of the run
	if err := ok.finish(&outcome{}); err != nil {
		t.Fatalf("in-order arrivals with repeats judged out of order: %v", err)
	}
	bad := &keyOrder{last: map[string]int{}, seen: map[int64]bool{}}
	arrive(bad, a2, b1, a1)
	if err := bad.finish(&outcome{}); err == nil || bad.violations != 1 {
		t.Fatalf("a successor arriving first was not found: %v (%d)", err, bad.violations)
	}
}
