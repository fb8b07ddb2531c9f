package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

var (
	// errPublishTimeout is the cause of a publish's context when publish_timeout passed.
	errPublishTimeout = errors.New("publish_timeout passed")
	// errConfirmTimeout: a message was sent and no confirm came in time.
	errConfirmTimeout = errors.New("publisher confirm timed out")
	// errNack: the broker answered basic.nack, an internal error on its side.
	errNack = errors.New("the broker nacked the message (basic.nack)")
)

// connectError is a failure to get a connection or a channel: nothing was sent.
type connectError struct {
	addr string // redacted
	err  error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("rabbitmq: connect to %s: %v", e.addr, e.err)
}
func (e *connectError) Unwrap() error { return e.err }

// connectionLostError is the end of a connection while messages awaited their confirms.
type connectionLostError struct {
	cause *amqp.Error // the library's or the broker's reason; nil when none was given
}

func (e *connectionLostError) Error() string {
	if e.cause == nil {
		return "rabbitmq: connection lost before the broker confirmed"
	}
	return "rabbitmq: connection lost before the broker confirmed: " + e.cause.Error()
}

func (e *connectionLostError) Unwrap() error {
	if e.cause == nil {
		return nil
	}
	return e.cause
}

// classify gives an error of the client, the broker or the network its router kind,
// keeping its text and chain. An error already classified keeps its kind.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var done *router.Error
	if errors.As(err, &done) {
		return err
	}
	return &router.Error{Kind: kindOf(err), Err: err}
}

func kindOf(err error) router.Kind {
	var (
		connect *connectError
		lost    *connectionLostError
		broker  *amqp.Error
	)
	switch {
	case errors.Is(err, context.Canceled):
		return router.KindCanceled
	case errors.Is(err, router.ErrClosed):
		return router.KindUnreachable
	case errors.Is(err, errConfirmTimeout), errors.Is(err, errNack):
		return router.KindRetryable
	case errors.As(err, &connect):
		// Nothing was sent: refused, unresolvable, untrusted, timed out, or the broker
		// turned down our credentials or vhost, which are the driver's, not a message's.
		return router.KindUnreachable
	case errors.As(err, &lost):
		// The broker may hold the messages; publishing them again is at-least-once. A
		// connection the broker closed for a protocol violation spends an attempt, so
		// that a message causing it cannot loop for ever at no cost.
		if c := lost.cause; c != nil && c.Server && hardCode(c.Code) {
			return router.KindRetryable
		}
		return router.KindUnreachable
	case errors.Is(err, context.DeadlineExceeded):
		return router.KindCanceled // the caller's deadline: ours is errPublishTimeout
	case errors.As(err, &broker):
		return brokerKind(broker)
	case lostConnection(err):
		return router.KindUnreachable
	}
	return router.KindRetryable
}

// brokerKind classifies an AMQP error. One the library made itself (Server false) is a
// channel or connection that is not open, or a frame it could not read: the connection,
// not the message; except an unsupported table field, which the message carried.
func brokerKind(e *amqp.Error) router.Kind {
	if !e.Server {
		if e.Code == amqp.SyntaxError {
			return router.KindPermanent
		}
		return router.KindUnreachable
	}
	switch e.Code {
	case amqp.NoRoute, amqp.NoConsumers, // returned: no queue takes it
		amqp.NotFound,           // the exchange does not exist
		amqp.AccessRefused,      // we may not write to the exchange
		amqp.PreconditionFailed, // above the broker's max_message_size, say
		amqp.InvalidPath, amqp.NotImplemented:
		return router.KindPermanent
	case amqp.ConnectionForced:
		// An operator closed the connection or the broker is shutting down: it will be
		// back, and nothing says it saw the message.
		return router.KindUnreachable
	}
	if hardCode(e.Code) {
		return router.KindPermanent // a frame the broker could not take: the message's
	}
	// CONTENT_TOO_LARGE ("retry later"), RESOURCE_LOCKED, RESOURCE_ERROR, NOT_ALLOWED,
	// INTERNAL_ERROR, CHANNEL_ERROR and codes we do not know.
	return router.KindRetryable
}

// hardCode reports a protocol violation: a frame the broker could not parse or did not
// expect. The broker closes the connection for it.
func hardCode(code int) bool {
	switch code {
	case amqp.FrameError, amqp.SyntaxError, amqp.CommandInvalid, amqp.UnexpectedFrame:
		return true
	}
	return false
}

// lostConnection reports an error that means we did not get to talk AMQP to the
// broker: it could not be dialled, resolved or TLS-verified, or the connection was
// closed under us.
func lostConnection(err error) bool {
	var op *net.OpError // any socket operation: AMQP's own reads and writes fail with one too
	return errors.As(err, &op) || driveropt.LostConnection(err)
}
