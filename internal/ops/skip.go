package ops

import (
	"context"
	"strings"

	"github.com/outboxd/outboxd/store"
)

// SkipRequest is the body of POST /api/v1/messages/skip, and what `outboxd skip` asks:
// either IDs, or a Stream and a Key, whose head (its first message not yet delivered)
// is skipped. Key is a pointer so that the empty key can be named.
type SkipRequest struct {
	// Outbox selects the outbox where the replica serves several (Pick).
	Outbox string  `json:"outbox,omitempty"`
	IDs    []int64 `json:"ids,omitempty"`
	Stream string  `json:"stream,omitempty"`
	Key    *string `json:"key,omitempty"`
}

// SkipResult is the answer to a skip, and `outboxd skip --json`. ID is the head a skip
// by stream and key skipped.
type SkipResult struct {
	Skipped int64 `json:"skipped"`
	ID      int64 `json:"id,omitempty"`
}

// Check refuses a request that names no messages, or names them both ways, saying why.
func (r SkipRequest) Check() error {
	keyed := r.Stream != "" || r.Key != nil
	switch {
	case r.IDs != nil && keyed:
		return invalid("give either ids or a stream and a key, not both")
	case r.IDs != nil:
		return checkIDs(r.IDs, store.MaxRequeueBatch, "")
	case r.Stream == "" && r.Key == nil:
		return invalid(`name the messages to skip: {"ids": [...]}, or {"stream": "...", "key": "..."} for the head of a key`)
	case r.Stream == "":
		return invalid("key: the head of a key is named with its stream too; give stream")
	case r.Key == nil:
		return invalid("stream: the head to skip is named with its key too; give key")
	}
	var found []string
	if msg := textProblem(r.Stream); msg != "" {
		found = append(found, "stream: "+msg)
	}
	if msg := textProblem(*r.Key); msg != "" {
		found = append(found, "key: "+strings.Replace(msg, "stream name", "key", 1))
	}
	return problems(found)
}

// Skip skips what req names: each of its IDs that is failed (and not yet skipped) or
// pending, or the head of its Stream's Key when that head is failed or pending. A
// request that skips nothing is an ErrConflict naming why, since an operator who asked for
// a skip expects one.
func (o *Ops) Skip(ctx context.Context, req SkipRequest) (SkipResult, error) {
	if err := req.Check(); err != nil {
		return SkipResult{}, err
	}
	if req.IDs != nil {
		n, err := o.store.Skip(ctx, req.IDs)
		if err != nil {
			return SkipResult{}, err
		}
		if n == 0 {
			return SkipResult{}, nothingSkipped(req.IDs)
		}
		return SkipResult{Skipped: n}, nil
	}
	id, ok, err := o.store.SkipHead(ctx, req.Stream, *req.Key)
	if err != nil {
		return SkipResult{}, err
	}
	if !ok {
		return SkipResult{}, conflict("key %q of stream %q has no head to skip: its head is leased (being published "+
			"right now: try again in a moment), or has never failed (skip by id to give up on a message that was never "+
			"tried), or nothing of the key is waiting (every message delivered or skipped, or no such stream or key)",
			*req.Key, req.Stream)
	}
	return SkipResult{Skipped: 1, ID: id}, nil
}

func nothingSkipped(ids []int64) error {
	const why = "a message is skipped only while failed (and not skipped yet) or pending; one that is leased " +
		"(being published right now: try again in a moment), delivered or already skipped, or that does not exist, is left alone"
	if len(ids) == 1 {
		return conflict("message %d was not skipped: %s", ids[0], why)
	}
	return conflict("none of the %d messages named was skipped: %s", len(ids), why)
}
