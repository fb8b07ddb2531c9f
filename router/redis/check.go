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
	if err := d.fits("the topic (the stream's key)", len(m.Topic)); err != nil {
		return err
	}
	if err := d.fits("the payload", len(m.Payload)); err != nil {
		return err
	}
	if err := d.fits("the key", len(m.Key)); err != nil {
		return err
	}
	if err := d.fits("the message id", len(m.DedupID())); err != nil {
		return err
	}
	for name, value := range m.Headers {
		if name == "" {
			return router.Permanent(fmt.Errorf("redis xadd %s: a header has an empty name; name it, or drop it", quote(m.Topic)))
		}
		if reserved[name] {
			continue // dropped: the fixed fields carry it
		}
		if err := d.fits("the name of header "+quote(name), len(HeaderFieldPrefix)+len(name)); err != nil {
			return err
		}
		if err := d.fits("header "+quote(name), len(value)); err != nil {
			return err
		}
	}
	return nil
}

// fits refuses a value of n bytes above max_payload_bytes.
func (d *Driver) fits(what string, n int) error {
	if n <= d.maxBytes {
		return nil
	}
	return router.Permanent(fmt.Errorf("redis: %s takes %d bytes and max_payload_bytes is %d "+
		"(a server refuses an argument above its proto-max-bulk-len, 512 MiB by default)", what, n, d.maxBytes))
}
