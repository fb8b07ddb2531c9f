package producer

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/table"
)

// InvalidMessageError reports a message the client refused before sending anything, so
// the caller's transaction is untouched. Check for it with errors.As.
type InvalidMessageError struct {
	Index  int    // position in the batch; -1 for a single Enqueue
	Field  string // "stream", "topic", "payload", "headers", "expires_at", …
	Reason string
}

func (e *InvalidMessageError) Error() string {
	msg := "producer: message"
	if e.Index >= 0 {
		msg += " " + strconv.Itoa(e.Index)
	}
	return msg + ": " + e.Field + ": " + e.Reason
}

// check reports the first problem with m, or nil. The database refuses the same inputs
// (except an empty header name) with constraints, but only by aborting the transaction.
func check(i int, m *Message) error {
	// A stream name configuration would refuse: its rows would wait for ever, unserved.
	if err := table.CheckStream(m.Stream); err != nil {
		reason := err.Error()
		if m.Stream != "" {
			reason += "; no outboxd configuration could serve such a stream"
		}
		return &InvalidMessageError{Index: i, Field: "stream", Reason: reason}
	}
	switch {
	case m.Topic == "":
		return &InvalidMessageError{Index: i, Field: "topic", Reason: "must not be empty"}
	case m.Payload == nil:
		return &InvalidMessageError{Index: i, Field: "payload", Reason: "must not be nil (use []byte{} for an empty payload)"}
	}
	if !m.ExpiresAt.IsZero() && !m.AvailableAt.IsZero() && !m.ExpiresAt.After(m.AvailableAt) {
		return &InvalidMessageError{Index: i, Field: "expires_at",
			Reason: "must be after available_at (" + m.AvailableAt.Format(time.RFC3339Nano) + "): the message could never be delivered"}
	}
	if _, ok := m.Headers[""]; ok {
		return &InvalidMessageError{Index: i, Field: "headers", Reason: "a header name must not be empty"}
	}
	// PostgreSQL text holds neither NUL nor invalid UTF-8; refusing them here keeps the
	// caller's transaction usable instead of letting the INSERT abort it.
	for _, f := range [...]struct{ name, value string }{
		{"stream", m.Stream}, {"topic", m.Topic}, {"key", m.Key}, {"message_id", m.MessageID},
	} {
		if reason := badText(f.value); reason != "" {
			return &InvalidMessageError{Index: i, Field: f.name, Reason: reason}
		}
	}
	for name, value := range m.Headers {
		if reason := badText(name); reason != "" {
			return &InvalidMessageError{Index: i, Field: "headers", Reason: "name " + strconv.Quote(name) + " " + reason}
		}
		if reason := badText(value); reason != "" {
			return &InvalidMessageError{Index: i, Field: "headers", Reason: "value of " + strconv.Quote(name) + " " + reason}
		}
	}
	return nil
}

// badText says why s cannot be stored as PostgreSQL text, or "".
func badText(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// checkAll checks a whole batch, so that none of it is written if any of it is wrong.
func checkAll(msgs []Message) error {
	for i := range msgs {
		if err := check(i, &msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

// headersJSON is the headers column as JSON text: an object of strings, {} for none.
func headersJSON(h map[string]string) string {
	if len(h) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(h) // a map of strings always marshals
	return string(b)
}

// nullable maps the Go zero value to SQL NULL for the optional text columns.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// availableAt is the bound value for available_at: NULL lets the statement fall back to
// the database clock.
func availableAt(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// expiring reports whether any message sets ExpiresAt, which needs the statements that
// name expires_at.
func expiring(msgs []Message) bool {
	for i := range msgs {
		if !msgs[i].ExpiresAt.IsZero() {
			return true
		}
	}
	return false
}
