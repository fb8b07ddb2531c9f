package natsconn

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
)

// Classify maps an error of the NATS client (core publish and connection errors, which
// both drivers meet) to what it costs the dispatcher:
//
//   - permanent: the message itself is unusable (bad subject, bigger than the server's
//     max_payload, a header the client cannot encode, headers on a server without them);
//   - unreachable: the connection is not up (closed, reconnecting, draining, no server,
//     stale, no PONG in time) or failed under the call (a network error the client
//     passes on as it is, such as a write to a reset connection): the server may not
//     have the message, and publishing it again is safe;
//   - canceled: a context error, which callers pass only when it is the caller's context;
//   - retryable: anything else, as the router's rule for unclassified errors says.
//
// nil stays nil.
func Classify(err error) error {
	var netErr net.Error
	switch {
	case err == nil:
		return nil
	case isAny(err, context.Canceled, context.DeadlineExceeded):
		return router.Canceled(err)
	case isAny(err, nats.ErrBadSubject, nats.ErrMaxPayload, nats.ErrBadHeaderMsg, nats.ErrHeadersNotSupported):
		return router.Permanent(err)
	case isAny(err,
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrReconnectBufExceeded,
		nats.ErrDisconnected, nats.ErrConnectionDraining, nats.ErrNoServers,
		nats.ErrStaleConnection, nats.ErrTimeout, nats.ErrInvalidConnection,
		net.ErrClosed, io.EOF, io.ErrUnexpectedEOF),
		errors.As(err, &netErr):
		return router.Unreachable(err)
	}
	return router.Retryable(err)
}

func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
