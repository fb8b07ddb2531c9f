//go:build linux

package chaos_test

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// outcome is one scenario's row in the results table.
type outcome struct {
	Scenario   string
	Committed  int           // messages in committed transactions
	Delivered  int           // committed messages that arrived where they belong, at least once
	Lost       int           // committed messages that never arrived: must be 0
	Duplicates int           // extra copies beyond the first, all destinations
	Phantoms   int           // arrivals of messages never committed (rolled back): must be 0
	Conflicts  int           // lease conflicts counted by the replicas (outboxd_lease_conflicts_total)
	Recover    time.Duration // from the end of the fault (or of production, if later) to every message confirmed
	Notes      []string
	Skipped    string // why the scenario did not run
	Failed     bool
}

// check judges a scenario from what arrived. A scenario runs the at-least-once check
// and any it adds (scenario.checks); each sees every arrival once.
//
// observe is called for every arrival, destination by destination, in arrival order
// (Seq) within each; m is the committed message it carries, nil when the arrival
// carries no message this scenario committed (rolled back, or not ours at all).
// finish adds what it found to the outcome and returns an error when the scenario
// must fail.
type check interface {
	observe(a arrival, m *produced)
	finish(o *outcome) error
}

// atLeastOnce is the suite's invariant: every committed message arrived where it
// belongs (its stream's destination, or the dead-letter stream for a message bound to
// fail) at least once, and nothing arrived that was never committed.
type atLeastOnce struct {
	committed map[int64]*produced
	ledger    *ledger
	seen      map[int64]int // arrivals where the message belongs
	misplaced []string      // arrivals somewhere else
	phantoms  []string
}

func newAtLeastOnce(committed map[int64]*produced, l *ledger) *atLeastOnce {
	return &atLeastOnce{committed: committed, ledger: l, seen: map[int64]int{}}
}

// destStream maps a destination to the stream whose messages belong there.
func destStream(dest string) string {
	switch {
	case strings.HasPrefix(dest, "kafka "):
		return streamOrders
	case strings.HasPrefix(dest, "jetstream "):
		return streamShipments
	case strings.HasPrefix(dest, "nats "):
		return streamPayments
	}
	return ""
}

func (c *atLeastOnce) observe(a arrival, m *produced) {
	if m == nil {
		why := "never written by this scenario"
		if c.ledger.isRolledBack(a.ID) {
			why = "its transaction was rolled back"
		}
		c.phantoms = append(c.phantoms, fmt.Sprintf("id %d at %s #%d: %s", a.ID, a.Dest, a.Seq, why))
		return
	}
	if a.DeadLetter != m.DeadLetter || (!a.DeadLetter && destStream(a.Dest) != m.Stream) {
		c.misplaced = append(c.misplaced, fmt.Sprintf("id %d (stream %s, dead letter %v) at %s", a.ID, m.Stream, m.DeadLetter, a.Dest))
		return
	}
	c.seen[a.ID]++
}

func (c *atLeastOnce) finish(o *outcome) error {
	o.Committed = len(c.committed)
	var lost []int64
	for id := range c.committed {
		n := c.seen[id]
		if n == 0 {
			lost = append(lost, id)
			continue
		}
		o.Delivered++
		o.Duplicates += n - 1
	}
	o.Lost, o.Phantoms = len(lost), len(c.phantoms)
	var problems []string
	if len(lost) > 0 {
		sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
		problems = append(problems, fmt.Sprintf("%d committed messages never arrived, e.g. %v", len(lost), lost[:min(10, len(lost))]))
	}
	if len(c.phantoms) > 0 {
		problems = append(problems, fmt.Sprintf("%d arrivals of messages never committed, e.g. %v", len(c.phantoms), c.phantoms[:min(5, len(c.phantoms))]))
	}
	if len(c.misplaced) > 0 {
		problems = append(problems, fmt.Sprintf("%d arrivals at the wrong destination, e.g. %v", len(c.misplaced), c.misplaced[:min(5, len(c.misplaced))]))
	}
	if len(problems) > 0 {
		return fmt.Errorf("at least once: %s", strings.Join(problems, "; "))
	}
	return nil
}

// judge hands every arrival to every check, destination by destination in Seq order,
// and collects their verdicts into o.
func judge(arrivals []arrival, committed map[int64]*produced, checks []check, o *outcome) error {
	sort.SliceStable(arrivals, func(i, j int) bool {
		if arrivals[i].Dest != arrivals[j].Dest {
			return arrivals[i].Dest < arrivals[j].Dest
		}
		return arrivals[i].Seq < arrivals[j].Seq
	})
	for _, a := range arrivals {
		m := committed[a.ID]
		for _, c := range checks {
			c.observe(a, m)
		}
	}
	var errs []string
	for _, c := range checks {
		if err := c.finish(o); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}
