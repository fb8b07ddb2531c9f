package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/store"
)

// ReplayChunk is how many originals one step of a replay copies, each step its own
// transaction: short locks, and a stopped replay keeps what it copied.
const ReplayChunk = 1000

// replayStepTimeout bounds each step of a replay (the plan, or one chunk).
const replayStepTimeout = time.Minute

// ReplayRequest is the body of POST /api/v1/messages/replay and what `outboxd replay`
// asks. Exactly one of: Stream, with an optional created_at window [Since, Until), Key,
// Topic and DryRun (count, copy nothing); Resume, the id of a replay to go on with; or
// Cancel, the id of a replay to stop.
type ReplayRequest struct {
	Stream string  `json:"stream,omitempty"`
	Since  string  `json:"since,omitempty"`
	Until  string  `json:"until,omitempty"`
	Key    *string `json:"key,omitempty"`
	Topic  string  `json:"topic,omitempty"`
	DryRun bool    `json:"dry_run,omitempty"`
	Resume int64   `json:"resume,omitempty"`
	Cancel int64   `json:"cancel,omitempty"`
}

// ReplayResult is the answer to a replay, and `outboxd replay --json`. A dry run has
// no ID and says how many messages a replay would copy (Total). State "running" after a
// request means it stopped before the end (the admin API's time budget): asking again
// with resume goes on.
type ReplayResult struct {
	ID      int64  `json:"id,omitempty"`
	Stream  string `json:"stream"`
	State   string `json:"state"`
	Copied  int64  `json:"copied"`
	Total   int64  `json:"total"`
	DryRun  bool   `json:"dry_run,omitempty"`
	Resumed bool   `json:"resumed,omitempty"`
}

// ReplayOptions tune one run of a replay; the zero value runs it to the end.
type ReplayOptions struct {
	// Progress, when not nil, hears the copies so far and the replay's total after
	// each chunk.
	Progress func(done, target int64)
	// Stop, when not zero, is when to stop starting chunks; the replay stays running.
	Stop time.Time
	// By names who asked, recorded with a new replay.
	By string
}

// Check refuses a request Replay would refuse, naming every problem at once.
func (r ReplayRequest) Check(now time.Time) error {
	_, err := r.filter(now)
	return err
}

// filter checks r: the one validation of a replay.
func (r ReplayRequest) filter(now time.Time) (store.ReplayFilter, error) {
	filtered := r.Stream != "" || r.Since != "" || r.Until != "" || r.Key != nil || r.Topic != "" || r.DryRun
	switch {
	case r.Resume < 0 || r.Cancel < 0:
		return store.ReplayFilter{}, invalid("resume and cancel take a replay id, a positive whole number")
	case r.Resume > 0 && r.Cancel > 0:
		return store.ReplayFilter{}, invalid("give either resume or cancel, not both")
	case (r.Resume > 0 || r.Cancel > 0) && filtered:
		return store.ReplayFilter{}, invalid("resume and cancel name a replay by id and take no filter (stream, since, until, key, topic, dry_run)")
	case r.Resume > 0 || r.Cancel > 0:
		return store.ReplayFilter{}, nil
	case r.Stream == "":
		return store.ReplayFilter{}, invalid("name the stream to replay, or a replay to resume or cancel by id")
	}
	f := store.ReplayFilter{Stream: r.Stream, Key: r.Key}
	if r.Topic != "" {
		f.Topic = &r.Topic
	}
	var found []string
	for _, field := range []struct {
		name string
		v    *string
	}{{"stream", &r.Stream}, {"key", r.Key}, {"topic", &r.Topic}} {
		if field.v != nil {
			if msg := textProblem(*field.v); msg != "" {
				found = append(found, field.name+": "+msg)
			}
		}
	}
	var err error
	if f.Since, err = ParseTime(r.Since, now); err != nil {
		found = append(found, "since: "+err.Error())
	}
	if f.Until, err = ParseTime(r.Until, now); err != nil {
		found = append(found, "until: "+err.Error())
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		found = append(found, "until must be after since")
	}
	return f, problems(found)
}

// Replay checks req and carries it out: a dry run counts, a new replay is recorded
// and copied chunk by chunk, each chunk its own transaction, until it is done or
// opt.Stop passes; resume goes on with a recorded replay, cancel stops one. A replay
// whose window reaches back to what retention purged is refused (ErrConflict), as is
// an id that names no replay. The error says how many were copied before it.
func (o *Ops) Replay(ctx context.Context, req ReplayRequest, opt ReplayOptions) (ReplayResult, error) {
	f, err := req.filter(o.now())
	if err != nil {
		return ReplayResult{}, err
	}
	step, cancel := context.WithTimeout(ctx, replayStepTimeout)
	defer cancel()
	var id int64
	var resumed bool
	switch {
	case req.DryRun:
		total, err := o.store.PlanReplay(step, f)
		return ReplayResult{Stream: f.Stream, State: "dry-run", Total: total, DryRun: true}, replayErr(err)
	case req.Cancel > 0:
		if _, err := o.store.CancelReplay(step, req.Cancel); err != nil {
			return ReplayResult{}, replayErr(err)
		}
		r, err := o.store.GetReplay(step, req.Cancel)
		return resultOf(r, false), replayErr(err)
	case req.Resume > 0:
		id, resumed = req.Resume, true
	default:
		if id, resumed, err = o.store.StartReplay(step, f, opt.By); err != nil {
			return ReplayResult{Stream: f.Stream}, replayErr(err)
		}
	}
	r, err := o.store.GetReplay(step, id)
	if err != nil {
		return ReplayResult{ID: id, Stream: f.Stream}, replayErr(err)
	}
	res := resultOf(r, resumed)
	for res.State == "running" && (opt.Stop.IsZero() || time.Now().Before(opt.Stop)) {
		cctx, cancel := context.WithTimeout(ctx, replayStepTimeout)
		p, err := o.store.ReplayChunk(cctx, id, ReplayChunk)
		cancel()
		if err != nil {
			return res, fmt.Errorf("replay %d stopped after copying %d of %d (resume it with its id): %w",
				id, res.Copied, res.Total, replayErr(err))
		}
		res.Copied, res.Total, res.State = p.Copied, p.Total, p.State
		if opt.Progress != nil {
			opt.Progress(res.Copied, max(res.Total, res.Copied))
		}
	}
	return res, nil
}

func resultOf(r store.Replay, resumed bool) ReplayResult {
	return ReplayResult{ID: r.ID, Stream: r.Filter.Stream, State: r.State, Copied: r.Copied, Total: r.Total, Resumed: resumed}
}

// replayErr turns the database's refusal of a replay into ErrInvalid or ErrConflict.
func replayErr(err error) error {
	var rr *store.ReplayRefusal
	if !errors.As(err, &rr) {
		return err
	}
	if rr.Kind == store.ReplayInvalid {
		return invalid("%s", rr.Msg)
	}
	return conflict("%s", rr.Msg)
}

// Summary is the one line that says, for a person, what a replay did.
func (r ReplayResult) Summary() string {
	switch {
	case r.DryRun:
		return fmt.Sprintf("a replay of stream %s would copy %d delivered messages (dry run: nothing copied)", r.Stream, r.Total)
	case r.State == "running":
		return fmt.Sprintf("replay %d of stream %s stopped at %d of %d copied: resume it with --resume %d", r.ID, r.Stream, r.Copied, r.Total, r.ID)
	}
	how, short := "", ""
	if r.Resumed {
		how = " (resumed)"
	}
	if r.State == "done" && r.Copied < r.Total {
		short = fmt.Sprintf("; %d counted at its start were gone before it reached them (purged by retention meanwhile)",
			r.Total-r.Copied)
	}
	return fmt.Sprintf("replay %d of stream %s%s: %s, %d of %d copied%s", r.ID, r.Stream, how, r.State, r.Copied, r.Total, short)
}
