package nats

import (
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

// classify maps the error of one publish to its kind. Core NATS has no errors beyond the
// client's own, so the rules are natsconn.Classify's: a bad subject, a payload over the
// server's max_payload or headers the server cannot take are permanent; a connection
// that is closed, reconnecting or otherwise down is unreachable.
func classify(err error) error { return natsconn.Classify(err) }

// classifyFlush maps a failed flush, whatever its cause, to unreachable: the messages
// before it may or may not have reached the server, and since delivery is at least once,
// publishing them again costs a possible duplicate, never a loss. The caller's own
// cancellation is handled before this.
func classifyFlush(err error) error { return router.Unreachable(err) }
