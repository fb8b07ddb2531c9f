// Package discard is a driver that sends nothing anywhere: it confirms every message at
// once and counts what it confirmed. It exists to measure the dispatcher and PostgreSQL
// without a broker (outboxd bench); a stream routed to it loses its messages by design.
//
// Invariant: every message Publish confirms is counted exactly once (messages and
// payload bytes, atomically, so concurrent pipelines may share one driver); after Close
// nothing is confirmed or counted, and every message fails as unreachable with
// router.ErrClosed, like the real drivers.
//
// It is not run through routertest: that suite reads messages back from a broker, and
// a discard driver has no consumer side. Its own tests cover counting, per-message
// results, cancellation and close.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package discard is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package discard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

var _ router.Driver = (*Driver)(nil)

// Driver confirms and counts messages without sending them.
type Driver struct {
	name     string
	log      *slog.Logger
	messages atomic.Int64
	bytes    atomic.Int64

	// mu orders Publish against Close: a batch counted before Close is in the totals
	// Close logs, and none is counted after.
	mu     sync.RWMutex
	closed bool
}

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "discard"

// Options configure the discard driver: it has no settings, since it connects to
// nothing.
type Options struct{}

// DefaultOptions returns the (empty) options.
func DefaultOptions() Options { return Options{} }

// Validate finds nothing to report.
func (Options) Validate() []driveropt.Problem { return nil }

// New returns the discard driver called name.
func New(name string, _ Options, logger *slog.Logger) (*Driver, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Driver{name: name, log: logger.With("driver", name)}, nil
}

// Publish confirms every message at once unless ctx has ended or the driver is closed.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	d.mu.RLock()
	defer d.mu.RUnlock()
	var fail error
	switch {
	case d.closed:
		fail = router.Unreachable(fmt.Errorf("driver %s: %w", d.name, router.ErrClosed))
	case ctx.Err() != nil:
		fail = router.Canceled(ctx.Err())
	}
	if fail != nil {
		for i := range errs {
			errs[i] = fail
		}
		return errs
	}
	var n int64
	for i := range msgs {
		n += int64(len(msgs[i].Payload))
	}
	d.messages.Add(int64(len(msgs)))
	d.bytes.Add(n)
	return errs
}

// Counts returns the messages confirmed so far and the sum of their payload sizes.
func (d *Driver) Counts() (messages, payloadBytes int64) {
	return d.messages.Load(), d.bytes.Load()
}

// Close stops confirming and logs the totals once, at info level: a process running
// this driver (outboxd bench's child dispatcher) reports what it swallowed that way.
// It is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	messages, bytes := d.Counts()
	d.log.Info(ClosedMessage, "messages", messages, "payload_bytes", bytes)
	return nil
}

// ClosedMessage is the log message Close writes with the totals.
const ClosedMessage = "discard driver closed"
