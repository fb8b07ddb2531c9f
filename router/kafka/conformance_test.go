package kafka

import (
	"maps"
	"slices"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	routertest.Run(t, conformanceHarness)
}

// conformanceHarness wires the suites to a fresh broker (or destination) of its own.
func conformanceHarness(t *testing.T) *routertest.Harness {
	k := testenv.NewKafka(t, 3)
	return &routertest.Harness{
		Driver: newDriver(t, testConfig(k.Addr())),
		Topic: func(t *testing.T) string {
			topic := uniqueTopic("conformance")
			createTopic(t, k.Addr(), topic, 3)
			return topic
		},
		Receive: func(t *testing.T, topic string, n int) []routertest.Received {
			var out []routertest.Received
			byPartition := readTopic(t, k.Addr(), topic, n)
			for _, p := range slices.Sorted(maps.Keys(byPartition)) {
				for _, m := range byPartition[p] {
					r := routertest.Received{Topic: m.Topic, Key: m.Key, Payload: m.Value, Headers: map[string]string{}}
					for _, h := range m.Headers {
						r.Headers[h.Key] = string(h.Value)
					}
					out = append(out, r)
				}
			}
			return out
		},
		Refused: func(t *testing.T, topic string) router.Message {
			return router.Message{ID: 1, Stream: "conformance", Topic: topic + ".missing", Key: []byte("key-4"), Payload: []byte("refused")}
		},
		Unreachable: func(t *testing.T) router.Driver {
			return newDriver(t, testConfig(refusingAddr(t)))
		},
		OrderedByKeyOnly: true,
	}
}
