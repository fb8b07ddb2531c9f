package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
)

func TestABadMessageFailsAlonePermanentlyWithItsReason(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	const limit = 1024
	big := strings.Repeat("x", limit+1)
	cases := []struct {
		name string
		bad  func(m *router.Message, key string)
		want string
	}{
		{"a message without a topic is refused", func(m *router.Message, _ string) { m.Topic = "" },
			"the message has no topic"},
		{"a topic longer than max_payload_bytes is refused", func(m *router.Message, _ string) { m.Topic = big },
			"the topic (the stream's key) takes 1025 bytes and max_payload_bytes is 1024"},
		{"a payload longer than max_payload_bytes is refused", func(m *router.Message, _ string) { m.Payload = []byte(big) },
			"the payload takes 1025 bytes and max_payload_bytes is 1024"},
		{"a key longer than max_payload_bytes is refused", func(m *router.Message, _ string) { m.Key = []byte(big) },
			"the key takes 1025 bytes"},
		{"a message id longer than max_payload_bytes is refused", func(m *router.Message, _ string) { m.MessageID = big },
			"the message id takes 1025 bytes"},
		{"a header value longer than max_payload_bytes is refused", func(m *router.Message, _ string) { m.Headers["trace"] = big },
			`header "trace" takes 1025 bytes`},
		{"a header name longer than max_payload_bytes is refused", func(m *router.Message, _ string) { m.Headers[big] = "v" },
			"takes 1027 bytes"}, // h: and the name
		{"a header with an empty name is refused", func(m *router.Message, _ string) { m.Headers[""] = "v" },
			"a header has an empty name"},
		{"a topic whose key holds a string is refused by the server", func(m *router.Message, key string) {
			m.Topic = key + ":text"
			if err := c.Set(context.Background(), m.Topic, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Del(context.Background(), m.Topic) })
		}, `is a string, not a stream: WRONGTYPE`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(addr)
			o.MaxPayloadBytes = limit
			d := newDriver(t, o)
			key := uniqueKey(t, c, "badinput")
			msgs := messages(key, 5)
			const bad = 2
			tc.bad(&msgs[bad], key)
			if check := d.Check(&msgs[bad]); tc.want != "" && !strings.Contains(tc.want, "WRONGTYPE") &&
				(router.KindOf(check) != router.KindPermanent || !strings.Contains(check.Error(), tc.want)) {
				t.Fatalf("Check: %v, want permanent saying %q", check, tc.want)
			}
			errs := d.Publish(testCtx(t), msgs)
			for i, err := range errs {
				switch {
				case i == bad && (router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("the bad message: %v (%s), want permanent saying %q", err, router.KindOf(err), tc.want)
				case i == bad && len(err.Error()) > 1000:
					t.Fatalf("the error quotes the bad value whole: %d bytes", len(err.Error()))
				case i != bad && err != nil:
					t.Fatalf("message %d failed beside the bad one: %v", i, err)
				}
			}
			for _, e := range readStream(t, c, key, len(msgs)-1) {
				if e.Values["h:seq"] == strconv.Itoa(bad) {
					t.Fatal("the bad message arrived")
				}
			}
		})
	}
}
