package redis

import (
	"context"
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// classify gives a go-redis, reply or network error its router kind, keeping its text
// and chain. An error a driver already classified keeps its kind.
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
	// Our own ending comes first: a dial aborted by our context wraps it too.
	if errors.Is(err, context.Canceled) {
		return router.KindCanceled
	}
	// A closed driver or client sends nothing: the server never saw the message.
	if errors.Is(err, router.ErrClosed) || errors.Is(err, goredis.ErrClosed) {
		return router.KindUnreachable
	}
	var reply goredis.Error
	if errors.As(err, &reply) {
		return replyKind(reply.Error())
	}
	if lostConnection(err) {
		return router.KindUnreachable
	}
	// Anything else, a read that timed out after the pipeline was written included,
	// may have reached the server: retry, spending an attempt.
	return router.KindRetryable
}

// replyKind classifies an error reply by its code, the reply's first word.
func replyKind(reply string) router.Kind {
	code, _, _ := strings.Cut(reply, " ")
	switch code {
	case "WRONGTYPE":
		// The key holds a string, list, hash…: no XADD to it can succeed until someone
		// deletes it, which outboxd must not do.
		return router.KindPermanent
	case "NOPERM":
		if strings.Contains(reply, " to run the ") {
			// The ACL forbids this user a command the driver uses (XADD, or MULTI and
			// EXEC for an ordered stream): every message on the driver would fail
			// alike, a fault of its configuration, as with NOAUTH below.
			return router.KindUnreachable
		}
		// The ACL forbids this user the message's key: like Kafka's authorisation
		// failures, the message cannot go where it is meant to.
		return router.KindPermanent
	case "NOAUTH", "WRONGPASS":
		// Authentication failed (no password given to a server that wants one, or the
		// wrong one). The credentials are the driver's, not the message's: failing the
		// message for good would fail every message of every stream on this driver,
		// and retrying would spend their attempts on a fault that does not heal by
		// itself. Nothing was written, so, as for Kafka's SASL failures, this is
		// unreachable: messages wait without spending attempts, the stream's breaker
		// opens, and `outboxd config check --connect` names the cause.
		return router.KindUnreachable
	case "OOM", "LOADING", "BUSY", "READONLY", "MISCONF", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN":
		// Out of memory under maxmemory, loading its data set, blocked by a script, a
		// replica since a failover, persistence failing, a primary without enough
		// replicas: the server refused this time and may take the message later.
		return router.KindRetryable
	case "EXECABORT":
		// Another message of the same ordered publish was refused as it was queued,
		// and the transaction was discarded with it: nothing of this one was added.
		return router.KindRetryable
	case "ERR":
		if driverFault(reply) {
			return router.KindUnreachable
		}
	}
	return router.KindRetryable
}

// driverFault reports an ERR reply to the connection's handshake that says the driver
// cannot use the server as configured (a database index the server lacks, a password
// it has no use for) or that the server turned the connection away (maxclients): as
// NOAUTH, nothing was written and nothing heals by retrying the message.
func driverFault(reply string) bool {
	for _, prefix := range []string{
		"ERR max number of clients reached",
		"ERR DB index is out of range",
		"ERR invalid DB index",
		"ERR AUTH <password> called without any password configured",
		"ERR Client sent AUTH, but no password is set",
	} {
		if strings.HasPrefix(reply, prefix) {
			return true
		}
	}
	return false
}

// isWrongType reports a WRONGTYPE reply.
func isWrongType(err error) bool {
	var reply goredis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE")
}

// isReply reports an error the server replied with, as opposed to one of the client or
// the network.
func isReply(err error) bool {
	var reply goredis.Error
	return errors.As(err, &reply)
}

// lostConnection reports an error that means we did not get to talk to the server: it
// could not be dialled, resolved or TLS-verified, or the connection was closed under us
// before a reply came.
func lostConnection(err error) bool { return driveropt.LostConnection(err) }
