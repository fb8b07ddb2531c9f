package postgres

import (
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	routertest.Run(t, conformanceHarness)
}

// conformanceHarness wires the suites to a fresh broker (or destination) of its own.
func conformanceHarness(t *testing.T) *routertest.Harness {
	in := newInbox(t)
	o := in.options()
	o.MaxPayloadBytes = 1024
	return &routertest.Harness{
		Driver: newDriver(t, o),
		Topic:  func(*testing.T) string { return "conformance." + suffix() },
		// A confirmed row is committed: one read finds every one of them.
		Receive: func(t *testing.T, topic string, n int) []routertest.Received {
			rows := in.rows(t, topic)
			if len(rows) != n {
				t.Fatalf("%d rows of topic %s in the inbox, want %d", len(rows), topic, n)
			}
			out := make([]routertest.Received, n)
			for i, r := range rows {
				out[i] = r.Received
			}
			return out
		},
		// The database refuses a NUL byte in text; Check says so before sending.
		Refused: func(_ *testing.T, topic string) router.Message {
			return router.Message{ID: 1, Stream: "conformance", Topic: topic + "\x00", Key: []byte("key-4"),
				Payload: []byte("refused"), RowDedupID: "refused-" + suffix()}
		},
		Unreachable: func(t *testing.T) router.Driver {
			o := DefaultOptions()
			o.URL = closedPort(t)
			return newDriver(t, o)
		},
	}
}
