package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A replay copies delivered rows of one stream into new pending rows (migration 0007).
// The statements live in the migration as functions, so that SQL operators and outboxd
// run the same code; this file calls them. Concurrency: a chunk locks its replay's row
// (FOR UPDATE) and moves the cursor in the transaction that inserts the copies, so an
// interrupted replay resumes without copying a row twice or skipping one, and two
// runners of one replay take turns. Time windows are on created_at, the database's clock.

// ReplayFilter names the delivered rows a replay copies: those of Stream created in
// [Since, Until) (zero: unbounded), of Key and Topic when not nil.
type ReplayFilter struct {
	Stream       string
	Since, Until time.Time
	Key, Topic   *string
}

// ReplayProgress is where a replay stands.
type ReplayProgress struct {
	Copied int64
	Total  int64  // delivered rows matching when the replay started
	State  string // running, done or cancelled
}

// Replay is one recorded replay.
type Replay struct {
	ID     int64
	Filter ReplayFilter
	ReplayProgress
	CreatedBy string
	CreatedAt time.Time
}

// ReplayStanding is the sampled state of one stream's replays: how many run, how many
// rows they still have to copy, and how many rows replays of the stream have copied in
// all, as the table records them.
type ReplayStanding struct {
	Stream    string
	Running   int64
	Remaining int64
	Copied    int64
}

// ReplayRefusal is a replay the database refused; Error is the operator's message.
type ReplayRefusal struct {
	Kind ReplayRefusalKind
	Msg  string
}

// ReplayRefusalKind says why a replay was refused.
type ReplayRefusalKind int

const (
	// ReplayInvalid is a request that does not check (SQLSTATE OBR00).
	ReplayInvalid ReplayRefusalKind = iota
	// ReplayPurged is a window reaching back to what retention removed (OBR01).
	ReplayPurged
	// ReplayUnknown names a replay that does not exist (OBR02).
	ReplayUnknown
)

func (r *ReplayRefusal) Error() string { return r.Msg }

// replayError turns the migration's SQLSTATEs into a ReplayRefusal and wraps the rest.
func (s *Store) replayError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		kinds := map[string]ReplayRefusalKind{"OBR00": ReplayInvalid, "OBR01": ReplayPurged, "OBR02": ReplayUnknown}
		if k, ok := kinds[pgErr.Code]; ok {
			return &ReplayRefusal{Kind: k, Msg: strings.TrimPrefix(pgErr.Message, "replay: ")}
		}
		if pgErr.Code == "42501" { // insufficient_privilege: the dispatcher's role, through the admin API
			return fmt.Errorf("%s in %s: %w (a replay inserts into %s and writes %s: run it as a role that may, "+
				"see docs/security.md)", op, s.table, err, s.table, s.table.Table+"_replays")
		}
	}
	return fmt.Errorf("%s in %s: %w", op, s.table, err)
}

// args are the filter as the functions take it, NULL for each bound left out.
func (f ReplayFilter) args() []any {
	at := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	return []any{f.Stream, at(f.Since), at(f.Until), f.Key, f.Topic}
}

// PlanReplay counts the delivered rows f names without copying any: a dry run. It
// refuses a window reaching back to the stream's purge horizon (ReplayPurged).
func (s *Store) PlanReplay(ctx context.Context, f ReplayFilter) (int64, error) {
	var total int64
	err := s.pool.QueryRow(ctx, `SELECT total FROM `+s.table.Derived("replay_plan")+`($1, $2, $3, $4, $5)`,
		f.args()...).Scan(&total)
	if err != nil {
		return 0, s.replayError("plan replay of "+f.Stream, err)
	}
	return total, nil
}

// StartReplay records a replay of f by who and returns its id; resumed is true when a
// running replay with the same filter already existed, whose id it returns instead.
func (s *Store) StartReplay(ctx context.Context, f ReplayFilter, who string) (id int64, resumed bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT replay_id, resumed FROM `+s.table.Derived("replay_start")+`($1, $2, $3, $4, $5, $6)`,
		append(f.args(), who)...).Scan(&id, &resumed)
	if err != nil {
		return 0, false, s.replayError("start replay of "+f.Stream, err)
	}
	return id, resumed, nil
}

// ReplayChunk copies the next chunk of replay id, at most limit rows, in one
// transaction, and returns the replay's progress after it.
func (s *Store) ReplayChunk(ctx context.Context, id int64, limit int) (ReplayProgress, error) {
	var p ReplayProgress
	err := s.pool.QueryRow(ctx, `SELECT copied, total, state FROM `+s.table.Derived("replay")+`($1, $2)`, id, limit).
		Scan(&p.Copied, &p.Total, &p.State)
	if err != nil {
		return p, s.replayError(fmt.Sprintf("replay %d", id), err)
	}
	return p, nil
}

// CancelReplay stops a running replay; false when it was not running.
func (s *Store) CancelReplay(ctx context.Context, id int64) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT `+s.table.Derived("replay_cancel")+`($1)`, id).Scan(&ok); err != nil {
		return false, s.replayError(fmt.Sprintf("cancel replay %d", id), err)
	}
	return ok, nil
}

// GetReplay reads replay id, or returns a ReplayUnknown refusal.
func (s *Store) GetReplay(ctx context.Context, id int64) (Replay, error) {
	r := Replay{ID: id}
	var since, until *time.Time
	err := s.pool.QueryRow(ctx, `SELECT stream, since, until, key, topic, copied, total, state, created_by, created_at
FROM `+s.table.Derived("replays")+` WHERE id = $1`, id).Scan(&r.Filter.Stream, &since, &until, &r.Filter.Key,
		&r.Filter.Topic, &r.Copied, &r.Total, &r.State, &r.CreatedBy, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, &ReplayRefusal{Kind: ReplayUnknown, Msg: fmt.Sprintf("replay %d: no such replay", id)}
	}
	if err != nil {
		return r, s.replayError(fmt.Sprintf("read replay %d", id), err)
	}
	if since != nil {
		r.Filter.Since = *since
	}
	if until != nil {
		r.Filter.Until = *until
	}
	return r, nil
}

// ReplayStandings samples the replays of the named streams, one entry per stream, zeros
// included. It reads the replays table only (its running index and, for the copied
// sum, its rows: one per replay ever made).
func (s *Store) ReplayStandings(ctx context.Context, streams []string) ([]ReplayStanding, error) {
	rows, err := s.pool.Query(ctx, `
SELECT s.stream,
       count(r.id) FILTER (WHERE r.state = 'running'),
       coalesce(sum(greatest(r.total - r.copied, 0)) FILTER (WHERE r.state = 'running'), 0)::bigint,
       coalesce(sum(r.copied), 0)::bigint
FROM unnest($1::text[]) AS s(stream)
LEFT JOIN `+s.table.Derived("replays")+` r ON r.stream = s.stream
GROUP BY s.stream`, streams)
	if err != nil {
		return nil, fmt.Errorf("sample replays of %s: %w", s.table, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplayStanding, error) {
		var r ReplayStanding
		err := row.Scan(&r.Stream, &r.Running, &r.Remaining, &r.Copied)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("sample replays of %s: %w", s.table, err)
	}
	return out, nil
}
