package store

import (
	"math"
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

// Resume says where each claim of a drain starts: after the previous claim's last row
// while claims come back full, from the zero Position after a short one and at least
// every RescanEvery. The zero Resume starts from the zero Position.
type Resume struct {
	from    Position
	scanned time.Time // when the last claim from the zero Position was asked for
}

// From is where the claim about to be made at now starts.
func (r *Resume) From(now time.Time) Position {
	if r.scanned.IsZero() || now.Sub(r.scanned) >= RescanEvery {
		r.from, r.scanned = Position{}, now
	}
	return r.from
}

// Claimed records the claim just made with limit: a full one is resumed after, and a
// short one (the backlog drained, or what remains lies behind) sends the next to the start.
func (r *Resume) Claimed(c Claim, limit int) {
	if len(c.Messages) < limit {
		r.from, r.scanned = Position{}, time.Time{}
		return
	}
	r.from = c.Last
}
