package webhook_test

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		name := "per message"
		if batch {
			name = "batch"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			routertest.Run(t, func(t *testing.T) *routertest.Harness {
				s := newSink(t, batch)
				return &routertest.Harness{
					Driver:  newDriver(t, options(s.url(), batch)),
					Topic:   func(*testing.T) string { return "conformance." + strconv.FormatUint(rand.Uint64(), 36) },
					Receive: s.receive,
					// Per message, a topic the endpoint answers 400 for. In batch mode,
					// a message the endpoint refuses in the same batch, so that its
					// request is refused whole and the driver must single it out.
					Refused: func(t *testing.T, topic string) router.Message {
						m := router.Message{ID: 1, Stream: "conformance", Topic: topic + ".refused", Key: []byte("key-4"), Payload: []byte("x")}
						if batch {
							m.Topic, m.Payload = topic, []byte("refused")
						}
						return m
					},
					Unreachable: func(t *testing.T) router.Driver { return newDriver(t, options(refusingURL(t), batch)) },
					// Per message, keys are sent in parallel; a batch is one array, in order.
					OrderedByKeyOnly: !batch,
				}
			})
		})
	}
}
