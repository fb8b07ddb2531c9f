package redis

import (
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	routertest.Run(t, conformanceHarness)
}

// conformanceHarness wires the suites to a fresh broker (or destination) of its own.
func conformanceHarness(t *testing.T) *routertest.Harness {
	addr, c := server(t)
	return &routertest.Harness{
		Driver: newDriver(t, testOptions(addr)),
		// XADD creates the stream and XRANGE reads it from its start, so a fresh
		// key is all a destination needs.
		Topic: func(t *testing.T) string { return uniqueKey(t, c, "conformance") },
		Receive: func(t *testing.T, topic string, n int) []routertest.Received {
			var out []routertest.Received
			for _, e := range readStream(t, c, topic, n) {
				out = append(out, received(t, topic, e))
			}
			return out
		},
		Refused: func(t *testing.T, topic string) router.Message {
			key := uniqueKey(t, c, "refused")
			if err := c.Set(context.Background(), key, "a string, not a stream", 0).Err(); err != nil {
				t.Fatal(err)
			}
			return router.Message{ID: 1, Stream: "conformance", Topic: key, Key: []byte("key-4"), Payload: []byte("refused")}
		},
		Unreachable: func(t *testing.T) router.Driver {
			return newDriver(t, testOptions(refusingAddr(t)))
		},
	}
}

// received is a stream entry as the suite's consumer sees it: the fixed fields become
// outboxd's headers again, and each h: field the producer header it carries.
func received(t *testing.T, topic string, e goredis.XMessage) routertest.Received {
	t.Helper()
	r := routertest.Received{Topic: topic, Headers: map[string]string{}}
	for field, v := range e.Values {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("entry %s: field %s holds %T", e.ID, field, v)
		}
		switch field {
		case FieldID:
			r.Headers[router.HeaderID] = s
		case FieldMessageID:
			r.Headers[router.HeaderMessageID] = s
		case FieldStream:
			r.Headers[router.HeaderStream] = s
		case FieldKey:
			r.Key = []byte(s)
		case FieldPayload:
			r.Payload = []byte(s)
		default:
			name, ok := strings.CutPrefix(field, HeaderFieldPrefix)
			if !ok {
				t.Fatalf("entry %s has the field %q, which is neither fixed nor a header's", e.ID, field)
			}
			r.Headers[name] = s
		}
	}
	return r
}
