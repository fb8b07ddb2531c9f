package nats

import "github.com/outboxd/outboxd/router/natsconn"

// EventHeader names the header of a CloudEvents attribute: natsconn.EventHeader.
func (d *Driver) EventHeader(attr string) string { return natsconn.EventHeader(attr) }
