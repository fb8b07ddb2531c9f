package webhook

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

var _ router.Checker = (*Driver)(nil)

// Check reports what Publish would refuse of m before anything is sent: no topic for a
// URL that needs one, a URL too long for a request line, a payload above
// max_payload_bytes and, per message, what an HTTP header cannot carry (a bad header
// name, a control character in a value or in the key, a header that frames the
// request) or, in batch mode, text that is not UTF-8 (JSON strings are).
func (d *Driver) Check(m *router.Message) error {
	fail := func(format string, args ...any) error {
		return router.Permanent(fmt.Errorf("message %d to topic %s: %s", m.ID, driveropt.Quote(m.Topic), fmt.Sprintf(format, args...)))
	}
	if m.Topic == "" && d.url.hasTopic {
		return router.Permanent(fmt.Errorf("message %d: %w", m.ID, errNoTopic))
	}
	if n := len(d.url.resolve(m.Topic)); n > maxURLBytes {
		return fail("the URL would take %d bytes, and at most %d are sent", n, maxURLBytes)
	}
	if len(m.Payload) > d.maxPayload {
		return fail("the payload takes %d bytes and max_payload_bytes is %d", len(m.Payload), d.maxPayload)
	}
	var problem string
	if d.batch {
		problem = jsonProblem(m)
	} else {
		problem = headerProblem(m)
	}
	if problem != "" {
		return fail("%s", problem)
	}
	return nil
}

var errNoTopic = errors.New("the message has no topic, and the url puts the topic in the request's URL")

// headerProblem says what of m the headers of a request cannot carry, or "".
func headerProblem(m *router.Message) string {
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		if msg := nameProblem(k); msg != "" {
			return msg
		}
		if framing(http.CanonicalHeaderKey(k)) {
			return fmt.Sprintf("header %s describes the HTTP connection, which net/http manages; a message cannot set it", http.CanonicalHeaderKey(k))
		}
		if msg := valueProblem("the value of header "+k, m.Headers[k]); msg != "" {
			return msg
		}
	}
	for _, f := range []struct{ what, v string }{
		{"stream name", m.Stream}, {"topic", m.Topic}, {"message id", m.DedupID()}, {"key", string(m.Key)},
	} {
		if msg := valueProblem("the "+f.what, f.v); msg != "" {
			return msg + " (it is sent as a header); batch mode carries any " + f.what
		}
	}
	return ""
}

// jsonProblem says what of m a JSON string cannot carry as it is, or "".
func jsonProblem(m *router.Message) string {
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		if !utf8.ValidString(k) || !utf8.ValidString(m.Headers[k]) {
			return fmt.Sprintf("header %q is not valid UTF-8, which a JSON batch cannot carry", k)
		}
	}
	for _, f := range []struct{ what, v string }{{"the stream name", m.Stream}, {"the topic", m.Topic}, {"the message id", m.DedupID()}} {
		if !utf8.ValidString(f.v) {
			return f.what + " is not valid UTF-8, which a JSON batch cannot carry"
		}
	}
	return ""
}
