package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

// Real errors, produced the way the driver meets them, where the local server can
// produce them; the rest are the server's answers as pgx hands them over.

// serverError runs sql on the test server and returns the error it answers with.
func serverError(t *testing.T, sql string) error {
	t.Helper()
	conn := testenv.Connect(t, testenv.AdminDSN())
	_, err := conn.Exec(testCtx(t), sql)
	if err == nil {
		t.Fatalf("%s succeeded", sql)
	}
	return err
}

func connectError(t *testing.T, dsn string) error {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), dsn)
	if err == nil {
		conn.Close(context.Background())
		t.Fatalf("connecting to %s succeeded", dsn)
	}
	return err
}

// noSuchDatabase is the admin DSN with a database that does not exist.
func noSuchDatabase(t *testing.T) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=no_such_db_%s sslmode=disable", cfg.Host, cfg.Port, cfg.User, suffix())
}

// cancelledError is what a statement returns under our cancelled context.
func cancelledError(t *testing.T) error {
	t.Helper()
	conn := testenv.Connect(t, testenv.AdminDSN())
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	_, err := conn.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("a statement under a cancelled context succeeded")
	}
	return err
}

// lostConnectionError is what a statement returns on a connection the server closed
// (as a restart does) since it was last used.
func lostConnectionError(t *testing.T) error {
	t.Helper()
	conn := testenv.Connect(t, testenv.AdminDSN())
	admin := testenv.Connect(t, testenv.AdminDSN())
	if _, err := admin.Exec(testCtx(t), "SELECT pg_terminate_backend($1)", conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 100 { // the first statement may still be written before the close is seen
		if _, err = conn.Exec(testCtx(t), "SELECT 1"); err != nil {
			return err
		}
	}
	t.Fatal("a terminated connection kept answering")
	return nil
}

func pgError(code, msg string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: msg}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	const where = "public.inbox"
	cases := []struct {
		name string
		err  error
		want router.Kind
		says string // the classified error's text holds this
	}{
		{"a missing inbox is permanent and says how to create it",
			serverError(t, "INSERT INTO public.no_inbox_"+suffix()+" VALUES (1)"), router.KindPermanent,
			"inbox table public.inbox does not exist: create it with docs/sql/inbox.sql"},
		{"an inbox in a schema that does not exist is permanent and says how to create it",
			pgError("3F000", `schema "nope" does not exist`), router.KindPermanent, "does not exist: create it with docs/sql/inbox.sql"},
		{"an inbox without a column the driver writes is permanent and says how to fix it",
			serverError(t, "SELECT no_such_column FROM pg_class"), router.KindPermanent, "lacks a column the driver writes"},
		{"an inbox the user may not insert into is permanent and says what to grant",
			pgError("42501", "permission denied for table inbox"), router.KindPermanent, "grant it USAGE on the schema and INSERT on the table"},
		{"an inbox without a unique index on message_id is permanent",
			pgError("42P10", "there is no unique or exclusion constraint matching the ON CONFLICT specification"), router.KindPermanent,
			"has no primary key or unique index on message_id"},
		{"a column of a type the driver cannot write is permanent",
			pgError("42804", `column "payload" is of type integer but expression is of type bytea`), router.KindPermanent, "compare it with docs/sql/inbox.sql"},
		{"a value the table cannot hold is permanent", serverError(t, "SELECT 1/0"), router.KindPermanent, "division by zero"},
		{"a NUL byte the server refuses is permanent", pgError("22021", `invalid byte sequence for encoding "UTF8": 0x00`), router.KindPermanent, "0x00"},
		{"a check violation is permanent", pgError("23514", `new row for relation "inbox" violates check constraint "c"`), router.KindPermanent, `"c"`},
		{"an index entry too large is permanent", pgError("54000", "index row size 3000 exceeds btree version 4 maximum 2704"), router.KindPermanent, "2704"},
		{"a serialization failure is retryable", pgError("40001", "could not serialize access"), router.KindRetryable, "serialize"},
		{"a deadlock is retryable", pgError("40P01", "deadlock detected"), router.KindRetryable, "deadlock"},
		{"a lock the statement could not get in time is retryable", pgError("55P03", "could not obtain lock"), router.KindRetryable, "lock"},
		{"a statement the server cancelled is retryable", serverError(t, "SET statement_timeout = 1; SELECT pg_sleep(1)"), router.KindRetryable, "57014"},
		{"a full disk is retryable", pgError("53100", "could not extend file"), router.KindRetryable, "extend"},
		{"an error code we do not know is retryable", pgError("ZZ999", "something new"), router.KindRetryable, "something new"},
		{"an error we cannot place is retryable", errors.New("something odd"), router.KindRetryable, "something odd"},
		{"a server shutting down is unreachable", pgError("57P01", "terminating connection due to administrator command"), router.KindUnreachable, "administrator"},
		{"a server crashing is unreachable", pgError("57P02", "terminating connection because of crash of another server process"), router.KindUnreachable, "crash"},
		{"a server starting up is unreachable", pgError("57P03", "the database system is starting up"), router.KindUnreachable, "starting up"},
		{"a server out of connection slots is unreachable", pgError("53300", "sorry, too many clients already"), router.KindUnreachable, "too many"},
		{"a standby that takes no writes is unreachable",
			serverError(t, "BEGIN READ ONLY; CREATE TABLE public.ro_"+suffix()+" (y int); COMMIT"), router.KindUnreachable, "read-only"},
		{"credentials the server rejects are unreachable: the driver, not the message, is wrong",
			pgError("28P01", `password authentication failed for user "outboxd"`), router.KindUnreachable, "password authentication"},
		{"a database that does not exist is unreachable: the driver, not the message, is wrong",
			connectError(t, noSuchDatabase(t)), router.KindUnreachable, "does not exist"},
		{"a refused connection is unreachable", connectError(t, closedPort(t)), router.KindUnreachable, "connect"},
		{"a connection the server closed is unreachable", lostConnectionError(t), router.KindUnreachable, ""},
		{"our cancelled context is canceled", cancelledError(t), router.KindCanceled, "canceled"},
		{"a closed driver is unreachable", fmt.Errorf("postgres driver %q: %w", "inbox", router.ErrClosed), router.KindUnreachable, "driver closed"},
		{"an error already classified keeps its kind", router.Unreachable(pgError("23514", "check")), router.KindUnreachable, "check"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(where, c.err)
			t.Logf("%T: %v", c.err, c.err)
			if k := router.KindOf(got); k != c.want {
				t.Fatalf("classify(%v) is %s, want %s", c.err, k, c.want)
			}
			if !strings.Contains(got.Error(), c.err.Error()) {
				t.Fatalf("classify(%v) = %v lost the error's text", c.err, got)
			}
			if !strings.Contains(got.Error(), c.says) {
				t.Fatalf("classify(%v) = %q does not say %q", c.err, got, c.says)
			}
			if !errors.Is(got, c.err) {
				t.Fatalf("classify(%v) = %v lost the error's chain", c.err, got)
			}
		})
	}
	if classify(where, nil) != nil {
		t.Fatal("classify(nil) is not nil")
	}
}

func TestOnlyDataErrorsSendABatchMessageByMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"a value out of range may be one message's", pgError("22003", "out of range"), true},
		{"invalid text may be one message's", pgError("22021", "invalid byte sequence"), true},
		{"a constraint of the consumer's may refuse one message", pgError("23514", "check"), true},
		{"a unique index of the consumer's may refuse one message", pgError("23505", "duplicate key"), true},
		{"an index entry too large is one message's", pgError("54000", "index row size"), true},
		{"a missing table is every message's", pgError("42P01", "no table"), false},
		{"a deadlock is the batch's", pgError("40P01", "deadlock"), false},
		{"a lost connection is the batch's", errors.New("EOF"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := dataError(fmt.Errorf("insert: %w", c.err)); got != c.want {
				t.Fatalf("dataError(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
