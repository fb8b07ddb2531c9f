package ops

import (
	"context"
	"fmt"
)

// MaxPayloadShown is how much of a payload OpenMessage reads at most: a page showing a
// message never carries more, whatever the row holds.
const MaxPayloadShown = 64 << 10

// MessageDetail is one message opened: its listing columns, headers and the first
// bytes of its payload. Truncated says that Payload is shorter than PayloadBytes.
type MessageDetail struct {
	Message
	Headers   map[string]string `json:"headers"`
	Payload   []byte            `json:"payload"`
	Truncated bool              `json:"truncated,omitempty"`
}

// OpenMessage reads the message with id, its payload cut at MaxPayloadShown bytes. An id
// that is no message id is ErrInvalid; one that names no row is ErrConflict, saying why
// it may be gone.
func (o *Ops) OpenMessage(ctx context.Context, id int64) (MessageDetail, error) {
	if id < 1 {
		return MessageDetail{}, invalid("id: want a message id, a whole number from 1, got %d", id)
	}
	m, ok, err := o.store.GetMessage(ctx, id, MaxPayloadShown)
	if err != nil {
		return MessageDetail{}, err
	}
	if !ok {
		return MessageDetail{}, conflict("no message %d in %s: never written, or purged by retention", id, o.store.Table())
	}
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	return MessageDetail{Message: newMessage(m.MessageSummary), Headers: m.Headers, Payload: m.Payload,
		Truncated: int64(len(m.Payload)) < m.PayloadBytes}, nil
}

// CountRequeue says how many failed messages req would requeue now, checking it as
// Requeue does: the count a confirmation shows before anything changes. By ids it is
// the number of ids (those not failed when the requeue runs are left alone).
func (o *Ops) CountRequeue(ctx context.Context, req RequeueRequest) (int64, error) {
	p, err := req.plan(o.now())
	if err != nil {
		return 0, err
	}
	if p.ids != nil {
		return int64(len(p.ids)), nil
	}
	n, err := o.store.CountFailed(ctx, p.filter)
	if err != nil {
		return 0, fmt.Errorf("count failed messages of stream %s: %w", p.filter.Stream, err)
	}
	if p.limit > 0 {
		n = min(n, p.limit)
	}
	return n, nil
}
