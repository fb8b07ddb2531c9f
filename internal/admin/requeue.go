package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/store"
)

// RequeueChunk is how many rows one step of a requeue changes: small enough that each
// statement's locks are short, large enough that a million rows take a thousand round
// trips.
const RequeueChunk = 1000

// requeueStepTimeout bounds each step of a requeue (one count, or one chunk).
const requeueStepTimeout = time.Minute

// RequeueStore is what a requeue needs from the database (*store.Store).
type RequeueStore interface {
	CountFailed(ctx context.Context, f store.RequeueFilter) (int64, error)
	RequeueIDs(ctx context.Context, ids []int64) (int64, error)
	RequeueFailed(ctx context.Context, f store.RequeueFilter) (store.RequeueResult, error)
}

// RequeueRequest is the body of POST /api/v1/messages/requeue and what `outboxd requeue`
// asks: either IDs, or a Stream with an optional created_at window and exactly one bound,
// Limit (at most that many, oldest first) or All (every matching message). Requiring the
// bound makes "every failed message of the stream" something the caller says, over HTTP
// as on the command line.
type RequeueRequest struct {
	IDs    []int64 `json:"ids,omitempty"`
	Stream string  `json:"stream,omitempty"`
	Since  string  `json:"since,omitempty"`
	Until  string  `json:"until,omitempty"`
	Limit  *int    `json:"limit,omitempty"`
	All    bool    `json:"all,omitempty"`
}

// RequeueResponse is the answer to a requeue, and `outboxd requeue --json`.
type RequeueResponse struct {
	Requeued int64 `json:"requeued"`
}

// RequeuePlan is a checked RequeueRequest: ids, or a filter with its bound. Plan is the
// one validation of a requeue; the HTTP handler and the CLI both go through it.
type RequeuePlan struct {
	ids    []int64
	filter store.RequeueFilter
	limit  int64 // with a filter: at most this many; 0 for all
}

// Plan checks r, naming every problem of a filter at once.
func (r RequeueRequest) Plan(now time.Time) (RequeuePlan, error) {
	filtered := r.Stream != "" || r.Since != "" || r.Until != "" || r.Limit != nil || r.All
	switch {
	case r.IDs != nil && filtered:
		return RequeuePlan{}, errors.New("give either ids or a filter (stream, since, until, limit or all), not both")
	case r.IDs != nil:
		if len(r.IDs) == 0 || len(r.IDs) > store.MaxRequeueBatch {
			return RequeuePlan{}, fmt.Errorf("ids: want 1 to %d ids, got %d (requeue more by filter, or in several calls)", store.MaxRequeueBatch, len(r.IDs))
		}
		for _, id := range r.IDs {
			if id < 1 {
				return RequeuePlan{}, fmt.Errorf("ids: %d is not a message id (ids are positive)", id)
			}
		}
		return RequeuePlan{ids: r.IDs}, nil
	case r.Stream == "":
		return RequeuePlan{}, errors.New("name the messages to requeue: ids, or a stream with optional since, until " +
			"(created_at) and a bound, limit N or all")
	}
	p := RequeuePlan{filter: store.RequeueFilter{Stream: r.Stream}}
	var problems []string
	if msg := textProblem(r.Stream); msg != "" {
		problems = append(problems, "stream: "+msg)
	}
	var err error
	if p.filter.Since, err = ParseTime(r.Since, now); err != nil {
		problems = append(problems, "since: "+err.Error())
	}
	if p.filter.Until, err = ParseTime(r.Until, now); err != nil {
		problems = append(problems, "until: "+err.Error())
	}
	if !p.filter.Since.IsZero() && !p.filter.Until.IsZero() && !p.filter.Until.After(p.filter.Since) {
		problems = append(problems, "until must be after since")
	}
	switch {
	case (r.Limit != nil) == r.All:
		problems = append(problems, "with a stream, give one bound: limit N (at most N messages, oldest first) or all (every matching one)")
	case r.Limit != nil && *r.Limit < 1:
		problems = append(problems, fmt.Sprintf("limit: want at least 1, got %d", *r.Limit))
	case r.Limit != nil:
		p.limit = int64(*r.Limit)
	}
	if len(problems) > 0 {
		return RequeuePlan{}, errors.New(strings.Join(problems, "; "))
	}
	return p, nil
}

// ByIDs reports whether the plan names ids (and how many), rather than a filter.
func (p RequeuePlan) ByIDs() (bool, int) { return p.ids != nil, len(p.ids) }

// Stream is the filtered stream, "" for a plan by ids.
func (p RequeuePlan) Stream() string { return p.filter.Stream }

// Requeue carries out p, chunk by chunk, each chunk its own short statement, so that no
// transaction stays open while it runs and a stopped requeue keeps what it did. progress,
// when not nil, hears the running total and the number matching when it started. A
// filtered requeue walks the matching rows in id order, each chunk starting after the
// last id the previous one selected, so a message that fails again while this runs is
// not requeued twice. The error says how many were requeued before it.
func Requeue(ctx context.Context, st RequeueStore, p RequeuePlan, progress func(done, target int64)) (int64, error) {
	if p.ids != nil {
		return requeueIDs(ctx, st, p.ids, progress)
	}
	return requeueFiltered(ctx, st, p.filter, p.limit, progress)
}

func requeueIDs(ctx context.Context, st RequeueStore, ids []int64, progress func(done, target int64)) (int64, error) {
	var total int64
	for rest := ids; len(rest) > 0; {
		chunk := rest[:min(len(rest), RequeueChunk)]
		rest = rest[len(chunk):]
		cctx, cancel := context.WithTimeout(ctx, requeueStepTimeout)
		n, err := st.RequeueIDs(cctx, chunk)
		cancel()
		if err != nil {
			return total, fmt.Errorf("requeue stopped after requeueing %d: %w", total, err)
		}
		total += n
		if progress != nil {
			progress(total, int64(len(ids)))
		}
	}
	return total, nil
}

func requeueFiltered(ctx context.Context, st RequeueStore, f store.RequeueFilter, limit int64, progress func(done, target int64)) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, requeueStepTimeout)
	matching, err := st.CountFailed(cctx, f)
	cancel()
	if err != nil {
		return 0, err
	}
	target := matching
	if limit > 0 {
		target = min(target, limit)
	}
	var total int64
	for limit == 0 || total < limit {
		f.Limit = RequeueChunk
		if limit > 0 {
			f.Limit = int(min(int64(RequeueChunk), limit-total))
		}
		cctx, cancel := context.WithTimeout(ctx, requeueStepTimeout)
		res, err := st.RequeueFailed(cctx, f)
		cancel()
		if err != nil {
			return total, fmt.Errorf("requeue stopped after requeueing %d: %w", total, err)
		}
		if res.LastID == 0 {
			break
		}
		total += res.Requeued
		f.AfterID = res.LastID
		if progress != nil {
			progress(total, max(target, total))
		}
	}
	return total, nil
}
