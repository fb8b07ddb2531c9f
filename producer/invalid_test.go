package producer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/table"
)

// SQLSTATE codes of the refusals.
const (
	checkViolation   = "23514"
	notNullViolation = "23502"
)

// badInputs are the messages the client refuses, each with the field it must name.
var badInputs = []struct {
	name  string
	field string
	spoil func(*producer.Message)
}{
	{"An empty stream is refused", "stream", func(m *producer.Message) { m.Stream = "" }},
	{"An upper-case stream name, which configuration refuses, is refused", "stream", func(m *producer.Message) { m.Stream = "Orders" }},
	{"A stream name with a space is refused", "stream", func(m *producer.Message) { m.Stream = "my orders" }},
	{"A stream name starting with a dot is refused", "stream", func(m *producer.Message) { m.Stream = ".orders" }},
	{"A stream name holding a double underscore is refused", "stream", func(m *producer.Message) { m.Stream = "shop__orders" }},
	{"A stream name of 64 bytes is refused", "stream", func(m *producer.Message) { m.Stream = strings.Repeat("s", 64) }},
	{"A NUL byte in the stream is refused", "stream", func(m *producer.Message) { m.Stream = "orders\x00" }},
	{"An empty topic is refused", "topic", func(m *producer.Message) { m.Topic = "" }},
	{"A nil payload is refused", "payload", func(m *producer.Message) { m.Payload = nil }},
	{"An empty header name is refused", "headers", func(m *producer.Message) { m.Headers = map[string]string{"a": "1", "": "2"} }},
	{"A NUL byte in the topic is refused", "topic", func(m *producer.Message) { m.Topic = "orders\x00paid" }},
	{"Invalid UTF-8 in the key is refused", "key", func(m *producer.Message) { m.Key = "\xff\xfe" }},
	{"A NUL byte in a header value is refused", "headers", func(m *producer.Message) { m.Headers = map[string]string{"trace": "a\x00b"} }},
	{"Invalid UTF-8 in the message id is refused", "message_id", func(m *producer.Message) { m.MessageID = "id-\xc3" }},
	{"An expiry not after the message's availability is refused", "expires_at", func(m *producer.Message) { m.ExpiresAt = m.AvailableAt }},
}

func TestTheClientRefusesABadMessageBeforeWritingAnything(t *testing.T) {
	t.Parallel()
	for _, ep := range publicEntryPoints {
		for _, bad := range badInputs {
			t.Run(ep.name+": "+bad.name, func(t *testing.T) {
				t.Parallel()
				e := setup(t)
				// A single write gets the bad message alone; a batch gets it after two good ones,
				// which must not be written either.
				msgs, index := delayed(), 2
				if ep.name == "Enqueue" || ep.name == "EnqueueSQL" {
					msgs, index = msgs[2:], -1
				}
				bad.spoil(&msgs[len(msgs)-1])
				x := ep.begin(e, t)

				_, err := ep.write(ctx(t), e.w, x, msgs)
				var invalid *producer.InvalidMessageError
				if !errors.As(err, &invalid) {
					t.Fatalf("error = %v, want an *InvalidMessageError", err)
				}
				if invalid.Index != index || invalid.Field != bad.field || invalid.Reason == "" {
					t.Fatalf("error = %+v, want index %d and field %q with a reason", invalid, index, bad.field)
				}

				// Nothing reached the database: the transaction is not aborted.
				good := immediate()[:1]
				if _, err := ep.write(ctx(t), e.w, x, good); err != nil {
					t.Fatalf("a good message after the refused one: %v", err)
				}
				x.commit(t)
				checkRows(t, e.rows(t, e.pg.Table), good)
			})
		}
	}
}

func TestInvalidMessageErrorSaysWhichMessageAndWhichField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  producer.InvalidMessageError
		want string
	}{
		{"A message of a batch is named by its index",
			producer.InvalidMessageError{Index: 3, Field: "stream", Reason: "must not be empty"},
			"producer: message 3: stream: must not be empty"},
		{"A single message has no index",
			producer.InvalidMessageError{Index: -1, Field: "topic", Reason: "must not be empty"},
			"producer: message: topic: must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAnEmptyBatchSendsNothing(t *testing.T) {
	t.Parallel()
	w, err := producer.New(table.Default)
	if err != nil {
		t.Fatal(err)
	}
	// No transaction at all: any attempt to use one would panic.
	if err := w.EnqueueBatch(context.Background(), nil, nil); err != nil {
		t.Errorf("EnqueueBatch of nothing: %v", err)
	}
	if err := w.EnqueueBatchSQL(context.Background(), nil, []producer.Message{}); err != nil {
		t.Errorf("EnqueueBatchSQL of nothing: %v", err)
	}
}

func TestAWriterNotMadeByNewRefusesToWrite(t *testing.T) {
	t.Parallel()
	var w producer.Writer
	msg := immediate()[0]
	if _, err := w.Enqueue(context.Background(), nil, msg); err == nil {
		t.Error("Enqueue on a zero Writer: no error")
	}
	if _, err := w.EnqueueSQL(context.Background(), nil, msg); err == nil {
		t.Error("EnqueueSQL on a zero Writer: no error")
	}
	if err := w.EnqueueBatch(context.Background(), nil, []producer.Message{msg}); err == nil {
		t.Error("EnqueueBatch on a zero Writer: no error")
	}
	if err := w.EnqueueBatchSQL(context.Background(), nil, []producer.Message{msg}); err == nil {
		t.Error("EnqueueBatchSQL on a zero Writer: no error")
	}
}

// The table refuses the same inputs, so that a producer writing its own INSERT (not using
// this client) fails loudly in its own transaction instead of queueing an unpublishable row.
func TestTheDatabaseRefusesBadInputWrittenAsPlainSQL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct {
		name       string
		columns    string
		values     string
		code       string
		constraint string // without the "<table>_" prefix
		column     string
	}{
		{"An empty stream violates stream_not_empty", "stream, topic, payload", `'', 't', 'x'`,
			checkViolation, "stream_not_empty", ""},
		{"An empty topic violates topic_not_empty", "stream, topic, payload", `'s', '', 'x'`,
			checkViolation, "topic_not_empty", ""},
		{"A NULL payload violates payload's not-null constraint", "stream, topic, payload", `'s', 't', NULL`,
			notNullViolation, "", "payload"},
		{"A header value that is a number violates headers_string_values", "stream, topic, headers, payload",
			`'s', 't', '{"a": 1}', 'x'`, checkViolation, "headers_string_values", ""},
		{"Headers that are an array violate headers_object", "stream, topic, headers, payload",
			`'s', 't', '["a"]', 'x'`, checkViolation, "headers_object", ""},
		{"A header value that is an object violates headers_string_values", "stream, topic, headers, payload",
			`'s', 't', '{"a": {"b": "c"}}', 'x'`, checkViolation, "headers_string_values", ""},
		{"An empty message_id violates message_id_not_empty", "stream, topic, payload, message_id",
			`'s', 't', 'x', ''`, checkViolation, "message_id_not_empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := e.pg.Pool.Exec(ctx(t),
				"INSERT INTO "+e.pg.Table.Qualified()+" ("+tc.columns+") VALUES ("+tc.values+")")
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				t.Fatalf("error = %v, want a PostgreSQL error", err)
			}
			want := ""
			if tc.constraint != "" {
				want = e.pg.Table.Table + "_" + tc.constraint
			}
			if pgErr.Code != tc.code || pgErr.ConstraintName != want || pgErr.ColumnName != tc.column {
				t.Fatalf("error %s (constraint %q, column %q), want code %s, constraint %q, column %q: %v",
					pgErr.Code, pgErr.ConstraintName, pgErr.ColumnName, tc.code, want, tc.column, pgErr)
			}
		})
	}
}
