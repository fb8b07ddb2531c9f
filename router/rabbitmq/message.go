package rabbitmq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// contentTypeHeader is the producer header whose value becomes the message's
// content_type property (any case; the header stays among the headers too).
const contentTypeHeader = "content-type"

// publishing returns m in AMQP's form: persistent, its headers a table of strings (the
// producer's, then the outbox id, stream and message id, which win over producer
// headers of the same name, and, since AMQP has no key of its own, the key as
// router.HeaderKey when there is one), message_id the de-duplication id, content_type
// from the producer's content-type header, timestamp now.
func publishing(m *router.Message, now time.Time) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+4)
	for k, v := range m.Headers {
		h[k] = v
	}
	id := m.DedupID()
	h[router.HeaderID] = strconv.FormatInt(m.ID, 10)
	h[router.HeaderStream] = m.Stream
	h[router.HeaderMessageID] = id
	if m.Key != nil {
		h[router.HeaderKey] = string(m.Key)
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  contentType(m.Headers),
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		Timestamp:    now,
		Body:         m.Payload,
	}
}

// contentType is the value of the content-type header, matched in any case; of several
// spellings, the one that sorts first wins.
func contentType(headers map[string]string) string {
	name, value := "", ""
	for k, v := range headers {
		if strings.EqualFold(k, contentTypeHeader) && (name == "" || k < name) {
			name, value = k, v
		}
	}
	return value
}

// check returns the permanent error of a message the broker or the client would refuse
// for its form, or nil. A routing key, header name, message id or content type is an
// AMQP short string (at most 255 bytes); all properties travel in one content header
// frame, which may not exceed frameMax (the broker closes the connection of a client
// that sends a larger one); the payload may not exceed maxBytes. An empty or non-UTF-8
// header name is refused too: consumers read names as text.
func check(m *router.Message, maxBytes, frameMax int) error {
	refuse := func(format string, args ...any) error {
		return router.Permanent(fmt.Errorf("rabbitmq: "+format, args...))
	}
	if n := len(m.Topic); n > maxShortString {
		return refuse("routing key %s is %d bytes; AMQP allows at most %d", driveropt.Quote(m.Topic), n, maxShortString)
	}
	if bad, why := badHeader(m.Headers); why != "" {
		return refuse("header name %s %s", driveropt.Quote(bad), why)
	}
	if id := m.DedupID(); len(id) > maxShortString {
		return refuse("message id %s is %d bytes; the AMQP message_id property holds at most %d", driveropt.Quote(id), len(id), maxShortString)
	}
	if ct := contentType(m.Headers); len(ct) > maxShortString {
		return refuse("the content-type header is %d bytes; the AMQP content_type property holds at most %d", len(ct), maxShortString)
	}
	if n := len(m.Payload); n > maxBytes {
		return refuse("the payload is %d bytes and max_message_bytes is %d", n, maxBytes)
	}
	if n := headerFrameBytes(m); n > frameMax {
		return refuse("the headers and properties take %d bytes and one AMQP frame holds %d (the connection's frame_max)", n, frameMax)
	}
	return nil
}

// badHeader returns the first (in sort order) header name AMQP cannot carry as a
// readable name, and why, or "" for why when there is none.
func badHeader(headers map[string]string) (name, why string) {
	for k := range headers {
		var w string
		switch {
		case k == "":
			w = "is empty"
		case len(k) > maxShortString:
			w = fmt.Sprintf("is %d bytes; AMQP allows at most %d", len(k), maxShortString)
		case !utf8.ValidString(k):
			w = "is not valid UTF-8"
		default:
			continue
		}
		if why == "" || k < name {
			name, why = k, w
		}
	}
	return name, why
}

// headerFrameBytes is the size of the content header frame that carries the
// properties publishing gives m: the frame's own 8 bytes, class, weight, body size and
// property flags (14), then each property.
func headerFrameBytes(m *router.Message) int {
	n := 8 + 14
	if ct := contentType(m.Headers); ct != "" {
		n += 1 + len(ct)
	}
	// A table field is its name, a type tag and a long string; the table starts with
	// its length.
	field := func(name string, value int) int { return 1 + len(name) + 1 + 4 + value }
	n += 4
	for k, v := range m.Headers {
		replaced := k == router.HeaderID || k == router.HeaderStream || k == router.HeaderMessageID ||
			(k == router.HeaderKey && m.Key != nil)
		if !replaced { // else the driver's own, counted below
			n += field(k, len(v))
		}
	}
	id := m.DedupID()
	n += field(router.HeaderID, len(strconv.FormatInt(m.ID, 10))) + field(router.HeaderStream, len(m.Stream)) +
		field(router.HeaderMessageID, len(id))
	if m.Key != nil {
		n += field(router.HeaderKey, len(m.Key))
	}
	n++ // delivery mode
	if id != "" {
		n += 1 + len(id)
	}
	n += 8 // timestamp
	return n
}

// returnedError is a message the broker handed back (basic.return) because no queue
// takes it: published mandatory, it is a refusal, not a silent drop.
type returnedError struct {
	exchange string
	ret      *amqp.Return
}

func (e *returnedError) Error() string {
	if e.exchange == "" {
		return fmt.Sprintf("rabbitmq: the default exchange has no queue named %q (%s)", e.ret.RoutingKey, e.ret.ReplyText)
	}
	return fmt.Sprintf("rabbitmq: exchange %q has no queue bound for routing key %q (%s)", e.exchange, e.ret.RoutingKey, e.ret.ReplyText)
}

// Unwrap returns the broker's reply as an *amqp.Error, which classify judges by its code.
func (e *returnedError) Unwrap() error {
	return &amqp.Error{Code: int(e.ret.ReplyCode), Reason: e.ret.ReplyText, Server: true}
}
