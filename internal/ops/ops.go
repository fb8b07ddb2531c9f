// Package ops holds the operators' operations on an outbox table: stats, the message
// listing, requeue, skip, replay, the sessions holding the table's locks and the
// description of the configured streams and drivers. It is internal to outboxd: the
// HTTP API (internal/admin) and the CLI verbs (cmd/outboxd)
// are thin edges over it, so both answer in the same shapes (its result types are the
// wire types) and refuse the same mistakes with the same words. Results also write
// themselves as text for a person (WriteText), which belongs to no transport. The
// requests that the CLI fills from flags register those flags themselves (cli.go), so a
// flag's name and help sit beside the field it sets; main still owns parsing.
//
// Invariants: every operation checks its whole request before it touches the database,
// and a request it refuses changes nothing; HTTP and the CLI reach the database, for
// these operations, only through this package; what it refuses is one of a few typed
// errors (ErrInvalid, ErrConflict), which each edge maps to its status or exit code in one
// place, and anything else is a failure of the database or the context.
package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// Store is what the operations read and change (*store.Store).
type Store interface {
	Table() table.Name
	Streams(ctx context.Context) ([]string, error)
	Backlogs(ctx context.Context, streams []string) ([]store.Backlog, error)
	Blocked(ctx context.Context, streams []string) ([]store.BlockedStream, error)
	UnservedStreams(ctx context.Context, served []string) ([]store.UnservedStream, error)
	ListMessages(ctx context.Context, f store.MessageFilter) ([]store.MessageSummary, error)
	ScanMessages(ctx context.Context, f store.ScanFilter) (store.ScanPage, error)
	LockHolders(ctx context.Context, streams []string) ([]store.LockHolder, error)
	GetMessage(ctx context.Context, id int64, maxPayload int) (store.MessageDetail, bool, error)
	CountFailed(ctx context.Context, f store.RequeueFilter) (int64, error)
	RequeueIDs(ctx context.Context, ids []int64) (int64, error)
	RequeueFailed(ctx context.Context, f store.RequeueFilter) (store.RequeueResult, error)
	Skip(ctx context.Context, ids []int64) (int64, error)
	SkipHead(ctx context.Context, stream, key string) (id int64, ok bool, err error)
	PlanReplay(ctx context.Context, f store.ReplayFilter) (int64, error)
	StartReplay(ctx context.Context, f store.ReplayFilter, who string) (id int64, resumed bool, err error)
	ReplayChunk(ctx context.Context, id int64, limit int) (store.ReplayProgress, error)
	CancelReplay(ctx context.Context, id int64) (bool, error)
	GetReplay(ctx context.Context, id int64) (store.Replay, error)
}

var _ Store = (*store.Store)(nil)

// Ops runs the operations against one table.
type Ops struct {
	store Store
	now   func() time.Time
}

// New returns the operations over st. now is the clock relative times ("since=2h")
// count back from; nil is time.Now.
func New(st Store, now func() time.Time) *Ops {
	if now == nil {
		now = time.Now
	}
	return &Ops{store: st, now: now}
}

// The kinds of refusal. An edge tells them apart with errors.Is; the error's text is
// the message for the operator, naming what is wrong.
var (
	// ErrInvalid is a request that does not check: nothing was read or changed (HTTP 400,
	// exit status 2).
	ErrInvalid = errors.New("invalid request")
	// ErrConflict is a valid request that found nothing it may change, where the caller
	// expects a change (HTTP 409, exit status 1).
	ErrConflict = errors.New("nothing to change")
)

// refusal is an error of one of the kinds above, with the operator's message.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func invalid(format string, args ...any) error {
	return &refusal{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &refusal{kind: ErrConflict, msg: fmt.Sprintf(format, args...)}
}
