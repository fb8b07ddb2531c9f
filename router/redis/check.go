package redis

import (
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/router"
)

var _ router.Checker = (*Driver)(nil)

// Check reports what Publish would refuse of m before anything is sent: no topic (the
// stream's key), an empty header name, or a value larger than max_payload_bytes. A
// server refuses an argument longer than its proto-max-bulk-len by closing the
// connection, which would fail every other message pipelined on it; refused here,
// the message fails alone.
//
// No header name can clash with another field: every header's field is
// HeaderFieldPrefix plus its name, the fixed fields have no ':', and two headers of one
// message never share a name. Whether the key holds a stream is learnt only from the
// server, when publishing.
func (d *Driver) Check(m *router.Message) error {
	if m.Topic == "" {
		return router.Permanent(errors.New("redis: the message has no topic, which names the stream to add it to"))
	}
	if len(m.Topic) > d.maxBytes {
		return d.tooLarge("the topic (the stream's key)", len(m.Topic))
	}
	if len(m.Payload) > d.maxBytes {
		return d.tooLarge("the payload", len(m.Payload))
	}
	if len(m.Key) > d.maxBytes {
		return d.tooLarge("the key", len(m.Key))
	}
	if id := m.DedupID(); len(id) > d.maxBytes {
		return d.tooLarge("the message id", len(id))
	}
	for name, value := range m.Headers {
		switch {
		case name == "":
			return router.Permanent(fmt.Errorf("redis xadd %s: a header has an empty name; name it, or drop it", quote(m.Topic)))
		case reserved[name]:
			// dropped: the fixed fields carry it
		case len(HeaderFieldPrefix)+len(name) > d.maxBytes:
			return d.tooLarge("the name of header "+quote(name), len(HeaderFieldPrefix)+len(name))
		case len(value) > d.maxBytes:
			return d.tooLarge("header "+quote(name), len(value))
		}
	}
	return nil
}

// tooLarge refuses a value of n bytes, above max_payload_bytes.
func (d *Driver) tooLarge(what string, n int) error {
	return router.Permanent(fmt.Errorf("redis: %s takes %d bytes and max_payload_bytes is %d "+
		"(a server refuses an argument above its proto-max-bulk-len, 512 MiB by default)", what, n, d.maxBytes))
}
