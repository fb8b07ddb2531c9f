package nats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Conn exposes the driver's connection so tests can wait for it to come back.
func Conn(d *Driver) *nats.Conn { return d.nc }

// WaitConnected returns once nc is connected, waiting for its status to change.
func WaitConnected(t *testing.T, nc *nats.Conn) {
	t.Helper()
	ch := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(ch)
	if nc.IsConnected() {
		return
	}
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("no connection within 15s (status %s)", nc.Status())
	}
}
