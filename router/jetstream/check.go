package jetstream

import (
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

var _ router.Checker = (*Driver)(nil)

// Check reports what the client would refuse of m before anything is sent.
func (d *Driver) Check(m *router.Message) error { return natsconn.Check(d.nc, m, true) }
