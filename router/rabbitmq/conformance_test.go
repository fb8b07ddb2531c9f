package rabbitmq

import (
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	routertest.Run(t, conformanceHarness)
}

// conformanceHarness wires the suites to a fresh broker (or destination) of its own.
func conformanceHarness(t *testing.T) *routertest.Harness {
	b := newBroker(t, "topic")
	return &routertest.Harness{
		Driver:  newDriver(t, testOptions(brokerURL(), b.exchange)),
		Topic:   b.topic,
		Receive: b.receive,
		Refused: func(t *testing.T, topic string) router.Message {
			// Mandatory and bound to no queue: the broker returns it.
			return router.Message{ID: 1, Stream: "conformance", Topic: topic + ".unbound", Payload: []byte("refused")}
		},
		Unreachable: func(t *testing.T) router.Driver {
			return newDriver(t, testOptions(refusingURL(t), b.exchange))
		},
		OrderedByKeyOnly: false, // one channel publishes a batch in order
	}
}
