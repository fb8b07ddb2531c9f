package store

import (
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Position is a place in a stream's claim order, (available_at, id). A claim from a
// position takes only rows after it; the zero Position is before every row.
//
// Why: acknowledged rows leave the claim index only at the next VACUUM, and until then
// their entries sit ahead of every pending row. A claim from the start steps over all
// of them, so while a backlog of a million rows drains, each claim walks further than
// the last (about 2,500 index pages at half way); one that starts where the previous
// claim ended walks none. A row can still land behind a position: one committed after
// later rows were claimed (its available_at is its INSERT's time), one whose claim was
// rolled back or whose lease was reclaimed, one skipped while another claim held it. A
// claim from the zero position finds those; callers must make one regularly.
type Position struct {
	at pgtype.Timestamptz
	id int64
}

// IsZero reports whether p is before every row.
func (p Position) IsZero() bool { return !p.at.Valid }

// args are p's statement parameters: the zero position is (-infinity, the least id).
func (p Position) args() (pgtype.Timestamptz, int64) {
	if !p.at.Valid {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, math.MinInt64
	}
	return p.at, p.id
}

// before reports whether p comes before q in claim order.
func (p Position) before(q Position) bool {
	if !p.at.Valid {
		return q.at.Valid
	}
	if !q.at.Valid {
		return false
	}
	if c := compareTimestamptz(p.at, q.at); c != 0 {
		return c < 0
	}
	return p.id < q.id
}

// compareTimestamptz orders two valid timestamps as PostgreSQL does, infinities included.
func compareTimestamptz(a, b pgtype.Timestamptz) int {
	rank := func(t pgtype.Timestamptz) int {
		switch t.InfinityModifier {
		case pgtype.NegativeInfinity:
			return -1
		case pgtype.Infinity:
			return 1
		}
		return 0
	}
	if ra, rb := rank(a), rank(b); ra != rb || ra != 0 {
		return ra - rb
	}
	return a.Time.Compare(b.Time)
}

// RescanEvery bounds how long a drain's claims may keep starting after the previous
// one's Last before one starts from the zero Position again: a row that landed behind
// them waits about this long at most on their account.
const RescanEvery = 200 * time.Millisecond

// Resume says where each claim of a stream's drain starts. One Resume is shared by the
// claimers of a stream (a pipeline's batch slots) and is safe for concurrent use: while
// claims come back full, the next starts after the furthest row any of them has claimed,
// not after its own previous claim's last row, which would make every claim step over
// the rows its neighbours took meanwhile (locked, or acknowledged and still indexed).
// After a short claim the next starts from the zero Position, and at least every
// RescanEvery one claim does. The zero Resume starts from the zero Position.
type Resume struct {
	mu      sync.Mutex
	from    Position  // the furthest last row of the full claims since the last short one
	scanned time.Time // when the last claim from the zero Position was asked for
}

// From is where the claim about to be made at now starts: the zero Position when the
// last claim from it is RescanEvery old (for this claim only: the others keep resuming
// after the furthest row), else after the furthest row claimed.
func (r *Resume) From(now time.Time) Position {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scanned.IsZero() || now.Sub(r.scanned) >= RescanEvery {
		r.scanned = now
		return Position{}
	}
	return r.from
}

// Restart records a claim from the zero Position made at now by other means, and
// forgets how far the claims had got: it starts a new drain.
func (r *Resume) Restart(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from, r.scanned = Position{}, now
}

// Claimed records a claim made with limit: a full one moves the position to its last
// row if that is further, and a short one (the backlog drained, or what remains lies
// behind) sends the next claim to the start.
func (r *Resume) Claimed(c Claim, limit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(c.Messages) < limit {
		r.from, r.scanned = Position{}, time.Time{}
		return
	}
	if r.from.before(c.Last) {
		r.from = c.Last
	}
}
