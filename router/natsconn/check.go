package natsconn

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
)

// Check reports what the client would refuse of m before anything is sent, as the
// drivers' Publish would classify it: a subject or header NATS cannot carry, or a
// message larger than the server's max_payload (when the connection knows it). dedup
// says whether the driver adds Nats-Msg-Id. It implements router.Checker for the NATS
// drivers, so that an ordered stream holds a key back instead of sending the message
// after one the client refused.
func Check(nc *nats.Conn, m *router.Message, dedup bool) error {
	if err := CheckSubject(m.Topic); err != nil {
		return router.Permanent(err)
	}
	msg := Msg(m, 1)
	if dedup {
		msg.Header["Nats-Msg-Id"] = []string{m.DedupID()}
	}
	if err := CheckHeaders(msg.Header); err != nil {
		return router.Permanent(fmt.Errorf("publish to %s: %w", m.Topic, err))
	}
	if limit := nc.MaxPayload(); limit > 0 {
		size := len(m.Payload) + len("NATS/1.0\r\n\r\n")
		for k, vs := range msg.Header {
			for _, v := range vs {
				size += len(k) + len(": \r\n") + len(v)
			}
		}
		if int64(size) > limit {
			return router.Permanent(fmt.Errorf("publish to %s: the message takes %d bytes and the server's max_payload is %d: %w",
				m.Topic, size, limit, nats.ErrMaxPayload))
		}
	}
	return nil
}
