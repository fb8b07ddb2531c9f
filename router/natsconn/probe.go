package natsconn

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// WaitConnected returns nil once nc is connected, or why it is not when ctx ends first.
// A connection is made in the background (Connect succeeds while the server is down),
// so a probe made right after Connect waits here for the first one.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			if err := nc.LastError(); err != nil {
				return fmt.Errorf("not connected to the server: %w", err)
			}
			return fmt.Errorf("not connected to the server: %w", ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}
