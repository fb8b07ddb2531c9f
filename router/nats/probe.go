package nats

import (
	"context"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

var _ router.Prober = (*Driver)(nil)

// Probe reports whether the server is connected: core NATS takes any valid subject, and
// nothing tells whether anyone listens.
func (d *Driver) Probe(ctx context.Context, _ string) error { return natsconn.WaitConnected(ctx, d.nc) }
