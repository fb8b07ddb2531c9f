package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/store"
)

// RequeueChunk is how many rows one step of a requeue changes: small enough that each
// statement's locks are short, large enough that a million rows take a thousand round
// trips.
const RequeueChunk = 1000

// requeueStepTimeout bounds each step of a requeue (one count, or one chunk).
const requeueStepTimeout = time.Minute

// RequeueRequest is the body of POST /api/v1/messages/requeue and what `outboxd requeue`
// asks: either IDs, or a Stream with an optional created_at window and exactly one bound,
// Limit (at most that many, oldest first) or All (every matching message). Requiring the
// bound makes "every failed message of the stream" something the caller says, over HTTP
// as on the command line.
type RequeueRequest struct {
	// Outbox selects the outbox where the replica serves several (Pick).
	Outbox string  `json:"outbox,omitempty"`
	IDs    []int64 `json:"ids,omitempty"`
	Stream string  `json:"stream,omitempty"`
	Since  string  `json:"since,omitempty"`
	Until  string  `json:"until,omitempty"`
	Limit  *int    `json:"limit,omitempty"`
	All    bool    `json:"all,omitempty"`
	// FromID and ToID bound the ids (both included); Key and Topic match exactly;
	// ErrorContains is a case-insensitive substring of the last error. They narrow a
	// stream's failed messages, as the console's filters do.
	FromID        int64  `json:"from_id,omitempty"`
	ToID          int64  `json:"to_id,omitempty"`
	Key           string `json:"key,omitempty"`
	Topic         string `json:"topic,omitempty"`
	ErrorContains string `json:"error_contains,omitempty"`
}

// RequeueResult is the answer to a requeue, and `outboxd requeue --json`.
type RequeueResult struct {
	Requeued int64 `json:"requeued"`
}

// requeuePlan is a checked RequeueRequest: ids, or a filter with its bound.
type requeuePlan struct {
	ids    []int64
	filter store.RequeueFilter
	limit  int64 // with a filter: at most this many; 0 for all
}

// Check refuses a request Requeue would refuse, naming every problem of a filter at once.
func (r RequeueRequest) Check(now time.Time) error {
	_, err := r.plan(now)
	return err
}

// plan checks r, naming every problem of a filter at once: the one validation of a
// requeue.
func (r RequeueRequest) plan(now time.Time) (requeuePlan, error) {
	filtered := r.Stream != "" || r.Since != "" || r.Until != "" || r.Limit != nil || r.All ||
		r.FromID != 0 || r.ToID != 0 || r.Key != "" || r.Topic != "" || r.ErrorContains != ""
	switch {
	case r.IDs != nil && filtered:
		return requeuePlan{}, invalid("give either ids or a filter (stream, since, until, from_id, to_id, key, topic, error_contains, " +
			"limit or all), not both")
	case r.IDs != nil:
		err := checkIDs(r.IDs, store.MaxRequeueBatch, " (requeue more by filter, or in several calls)")
		return requeuePlan{ids: r.IDs}, err
	case r.Stream == "":
		return requeuePlan{}, invalid("name the messages to requeue: ids, or a stream with optional since, until " +
			"(created_at) and a bound, limit N or all")
	}
	p := requeuePlan{filter: store.RequeueFilter{Stream: r.Stream, AfterID: max(r.FromID-1, 0), ToID: r.ToID,
		Key: r.Key, Topic: r.Topic, ErrorContains: r.ErrorContains}}
	var found []string
	for _, t := range []struct{ name, v string }{{"stream", r.Stream}, {"key", r.Key}, {"topic", r.Topic}, {"error_contains", r.ErrorContains}} {
		if msg := textProblem(t.v); msg != "" {
			found = append(found, t.name+": "+msg)
		}
	}
	switch {
	case r.FromID < 0 || r.ToID < 0:
		found = append(found, "from_id and to_id: want message ids, whole numbers from 1")
	case r.FromID > 0 && r.ToID > 0 && r.ToID < r.FromID:
		found = append(found, fmt.Sprintf("to_id (%d) must not be below from_id (%d)", r.ToID, r.FromID))
	}
	var err error
	if p.filter.Since, err = ParseTime(r.Since, now); err != nil {
		found = append(found, "since: "+err.Error())
	}
	if p.filter.Until, err = ParseTime(r.Until, now); err != nil {
		found = append(found, "until: "+err.Error())
	}
	if !p.filter.Since.IsZero() && !p.filter.Until.IsZero() && !p.filter.Until.After(p.filter.Since) {
		found = append(found, "until must be after since")
	}
	switch {
	case (r.Limit != nil) == r.All:
		found = append(found, "with a stream, give one bound: limit N (at most N messages, oldest first) or all (every matching one)")
	case r.Limit != nil && *r.Limit < 1:
		found = append(found, fmt.Sprintf("limit: want at least 1, got %d", *r.Limit))
	case r.Limit != nil:
		p.limit = int64(*r.Limit)
	}
	if err := problems(found); err != nil {
		return requeuePlan{}, err
	}
	return p, nil
}

// Requeue checks req and carries it out, chunk by chunk, each chunk its own short
// statement, so that no transaction stays open while it runs and a stopped requeue
// keeps what it did. progress, when not nil, hears the running total and the number
// matching when it started. A filtered requeue walks the matching rows in id order,
// each chunk starting after the last id the previous one selected, so a message that
// fails again while this runs is not requeued twice. The error says how many were
// requeued before it.
func (o *Ops) Requeue(ctx context.Context, req RequeueRequest, progress func(done, target int64)) (RequeueResult, error) {
	p, err := req.plan(o.now())
	if err != nil {
		return RequeueResult{}, err
	}
	var n int64
	if p.ids != nil {
		n, err = requeueIDs(ctx, o.store, p.ids, progress)
	} else {
		n, err = requeueFiltered(ctx, o.store, p.filter, p.limit, progress)
	}
	return RequeueResult{Requeued: n}, err
}

func requeueIDs(ctx context.Context, st Store, ids []int64, progress func(done, target int64)) (int64, error) {
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

func requeueFiltered(ctx context.Context, st Store, f store.RequeueFilter, limit int64, progress func(done, target int64)) (int64, error) {
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
