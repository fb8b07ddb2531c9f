package rabbitmq

import "github.com/outboxd/outboxd/router"

var _ router.Checker = (*Driver)(nil)

// Check reports what Publish would refuse of m before anything is sent: a routing key
// or header name AMQP cannot carry, headers beyond one frame, a payload over
// max_message_bytes. Whether a queue takes m is learnt only from the broker.
func (d *Driver) Check(m *router.Message) error {
	return check(m, d.maxBytes, d.frameMax())
}
