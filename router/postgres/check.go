package postgres

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outboxd/outboxd/router"
)

var _ router.Checker = (*Driver)(nil)

// maxMessageIDBytes bounds the message id, the inbox's primary key. PostgreSQL refuses
// a B-tree entry larger than about a third of a page (2704 bytes, after compression),
// so whether a longer id fits would depend on how well it compresses; a rule decides
// instead.
const maxMessageIDBytes = 2000

// Check reports what the database would refuse of m before anything is sent: no topic,
// text it cannot store (a NUL byte, invalid UTF-8) in the message id, stream, topic or a
// header, a message id too long for the primary key, or a payload over
// max_payload_bytes. Whether the inbox exists is learnt only from the database.
func (d *Driver) Check(m *router.Message) error {
	refuse := func(format string, args ...any) error {
		return router.Permanent(d.wrap(fmt.Errorf(format, args...)))
	}
	if m.Topic == "" {
		return refuse("the message has no topic")
	}
	id := m.DedupID()
	for _, f := range [...]struct{ name, value string }{{"topic", m.Topic}, {"stream", m.Stream}, {"message id", id}} {
		if why := badText(f.value); why != "" {
			return refuse("the %s %s %s", f.name, quote(f.value), why)
		}
	}
	if len(id) > maxMessageIDBytes {
		return refuse("the message id is %d bytes long; the inbox's primary key takes at most %d", len(id), maxMessageIDBytes)
	}
	for name, value := range m.Headers {
		if replaced(name) {
			continue
		}
		if why := badText(name); why != "" {
			return refuse("the header name %s %s", quote(name), why)
		}
		if why := badText(value); why != "" {
			return refuse("the value of header %s %s", quote(name), why)
		}
	}
	if len(m.Payload) > d.maxPayload {
		return refuse("the payload is %d bytes and max_payload_bytes is %d", len(m.Payload), d.maxPayload)
	}
	return nil
}

// badText says why s cannot be stored as PostgreSQL text (or as a jsonb string, which
// refuses \u0000 as well), or "".
func badText(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "holds a NUL byte, which PostgreSQL text cannot store"
	case !utf8.ValidString(s):
		return "is not valid UTF-8, which PostgreSQL text and jsonb require"
	}
	return ""
}

// quote quotes a value for an error, shortened so that the reason survives the
// bounded last_error; %q shows a NUL and invalid bytes as escapes.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "…"
	}
	return strconv.Quote(s)
}

// replaced reports a producer header that the outbox headers replace.
func replaced(name string) bool {
	return name == router.HeaderID || name == router.HeaderStream || name == router.HeaderMessageID
}

// appendHeaders appends m's headers to b as a JSON object: the producer's headers, then
// the outbox id, stream and message id, which replace a producer header of the same
// name. Check has refused NUL bytes and invalid UTF-8, so every string is valid JSON
// text once quotes, backslashes and control characters are escaped.
func appendHeaders(b []byte, m *router.Message) []byte {
	b = append(b, '{')
	for name, value := range m.Headers {
		if replaced(name) {
			continue
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendJSONString(b, value)
		b = append(b, ',')
	}
	b = appendJSONString(b, router.HeaderID)
	b = append(b, `:"`...)
	b = strconv.AppendInt(b, m.ID, 10)
	b = append(b, `",`...)
	b = appendJSONString(b, router.HeaderStream)
	b = append(b, ':')
	b = appendJSONString(b, m.Stream)
	b = append(b, ',')
	b = appendJSONString(b, router.HeaderMessageID)
	b = append(b, ':')
	b = appendJSONString(b, m.DedupID())
	return append(b, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
