package jetstream

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

var _ router.Prober = (*Driver)(nil)

// Probe reports whether a JetStream stream captures subject (a subject or a pattern;
// for a pattern, any stream capturing part of it counts).
func (d *Driver) Probe(ctx context.Context, subject string) error {
	if err := natsconn.WaitConnected(ctx, d.nc); err != nil {
		return err
	}
	if subject == "" {
		return nil
	}
	covered, err := StreamCovers(ctx, d.nc, subject)
	if err != nil {
		return err
	}
	if !covered {
		return &router.NoDestinationError{Reason: fmt.Sprintf("no JetStream stream captures subject %q", subject)}
	}
	return nil
}
