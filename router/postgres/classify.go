package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/router"
)

// inboxScript is where the documentation keeps the inbox's shape, named in every error
// that means the table is missing or has the wrong shape.
const inboxScript = "docs/sql/inbox.sql"

// classify gives a pgx or network error met inserting into inbox table where its router
// kind, keeping its chain, and words it: a missing or misshapen table says how to create
// it. An error a driver already classified keeps its kind.
func classify(where string, err error) error {
	if err == nil {
		return nil
	}
	var done *router.Error
	if errors.As(err, &done) {
		return err
	}
	return &router.Error{Kind: kindOf(err), Err: explain(where, err)}
}

func kindOf(err error) router.Kind {
	// Our own ending comes first: a dial aborted by our context wraps it too.
	if errors.Is(err, context.Canceled) {
		return router.KindCanceled
	}
	if errors.Is(err, router.ErrClosed) {
		return router.KindUnreachable
	}
	// A connection the server refused (credentials, no such database, too many
	// connections, starting up or shutting down) is the driver's, not the message's:
	// nothing was inserted.
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return router.KindUnreachable
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return codeKind(pg.Code)
	}
	// A connection lost, or an error pgx met before it sent anything: the statement
	// was not run, or its transaction did not commit before we heard of it; if it did,
	// the primary key absorbs the re-publish.
	if lostConnection(err) || pgconn.SafeToRetry(err) {
		return router.KindUnreachable
	}
	// Anything else, an answer that did not come in time included, may have been
	// committed: retry, spending an attempt.
	return router.KindRetryable
}

// codeKind classifies a server error by its SQLSTATE.
func codeKind(code string) router.Kind {
	class := code[:min(2, len(code))]
	switch {
	case class == "22", class == "23", class == "54":
		// Data the table refuses (a value out of range, a constraint of the
		// consumer's, an index entry too large): this message will never fit.
		return router.KindPermanent
	case class == "42", code == "3F000":
		// The table, a column or the privilege is missing, or a column has a type the
		// statement cannot write: every message fails until someone changes the table.
		return router.KindPermanent
	case class == "08", class == "28", code == "3D000", code == "53300",
		code == "57P01", code == "57P02", code == "57P03", code == "25006":
		// Connection failures, credentials, a database that does not exist, no free
		// connection slot, a server shutting down or starting up, a standby that takes
		// no writes: the server did not take the message; defer without an attempt
		// and let the breaker pause the streams.
		return router.KindUnreachable
	}
	// Serialization failures, deadlocks, lock timeouts, a statement cancelled by the
	// server, disk full, codes we do not know: the insert may succeed later.
	return router.KindRetryable
}

// dataError reports an error for the data of the batch rather than for the table or
// the connection: some message of the batch may be at fault, alone. Re-publishes raise
// no unique violation here (insert absorbs them with ON CONFLICT), so any unique
// violation is a constraint of the consumer's.
func dataError(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	switch pg.Code[:min(2, len(pg.Code))] {
	case "22", "23", "54":
		return true
	}
	return false
}

// uniqueViolation reports a unique index refusing a row: on the primary key, a message
// already in the inbox.
func uniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}

// explain words err for an operator: what is wrong with the inbox and what to do.
func explain(where string, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("inbox table %s does not exist: create it with %s: %w", where, inboxScript, err)
		case "42703": // undefined_column
			return fmt.Errorf("inbox table %s lacks a column the driver writes (message_id, outbox_id, stream, topic, key, headers, payload): create it with %s: %w",
				where, inboxScript, err)
		case "42501": // insufficient_privilege
			return fmt.Errorf("the database user may not insert into inbox table %s: grant it USAGE on the schema and INSERT on the table: %w", where, err)
		case "42P10": // invalid_column_reference: no unique index for ON CONFLICT
			return fmt.Errorf("inbox table %s has no primary key or unique index on message_id, which absorbs re-publishes: create it with %s: %w",
				where, inboxScript, err)
		case "42804", "42846": // datatype_mismatch, cannot_coerce
			return fmt.Errorf("a column of inbox table %s has a type the driver cannot write: compare it with %s: %w", where, inboxScript, err)
		}
	}
	return fmt.Errorf("insert into inbox table %s: %w", where, err)
}

// lostConnection reports an error that means we did not get to talk to the server: it
// could not be dialled or resolved, or the connection was closed under us.
func lostConnection(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}
