package postgres

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
)

// TestBadMessagesFailAlonePermanentlyWithTheirReason publishes, for each kind of message
// the database would refuse, a batch of five with the bad one in the middle: it fails
// permanently with a reason naming what is wrong, and the other four are inserted.
func TestBadMessagesFailAlonePermanentlyWithTheirReason(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	o := in.options()
	o.MaxPayloadBytes = 16
	d := newDriver(t, o)
	cases := []struct {
		name string
		bad  func(m *router.Message)
		want string
	}{
		{"A message without a topic is refused.", func(m *router.Message) { m.Topic = "" }, "has no topic"},
		{"A NUL byte in the topic is refused.", func(m *router.Message) { m.Topic += "\x00x" }, `topic "bad.`},
		{"Invalid UTF-8 in the topic is refused.", func(m *router.Message) { m.Topic += "\xff" }, "is not valid UTF-8"},
		{"A NUL byte in the stream is refused.", func(m *router.Message) { m.Stream = "or\x00ders" }, `the stream "or\x00ders" holds a NUL byte`},
		{"A NUL byte in the message id is refused.", func(m *router.Message) { m.MessageID = "id\x00" }, "the message id"},
		{"Invalid UTF-8 in the message id is refused.", func(m *router.Message) { m.MessageID = "id\xc3" }, "is not valid UTF-8"},
		{"A message id too long for the primary key is refused.",
			func(m *router.Message) { m.MessageID = strings.Repeat("i", maxMessageIDBytes+1) }, "the inbox's primary key takes at most 2000"},
		{"A NUL byte in a header value is refused.",
			func(m *router.Message) { m.Headers = map[string]string{"trace": "a\x00b"} }, `the value of header "trace" holds a NUL byte`},
		{"Invalid UTF-8 in a header value is refused.",
			func(m *router.Message) { m.Headers = map[string]string{"trace": "\xfe"} }, `the value of header "trace" is not valid UTF-8`},
		{"Invalid UTF-8 in a header name is refused.",
			func(m *router.Message) { m.Headers = map[string]string{"tr\xe2ce": "x"} }, "the header name"},
		{"A payload over max_payload_bytes is refused.",
			func(m *router.Message) { m.Payload = make([]byte, 17) }, "the payload is 17 bytes and max_payload_bytes is 16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			topic := "bad." + suffix()
			msgs := messages(topic, 5)
			c.bad(&msgs[2])
			errs := d.Publish(testCtx(t), msgs)
			for i, err := range errs {
				switch {
				case i == 2 && router.KindOf(err) != router.KindPermanent:
					t.Fatalf("the bad message: %v (%s), want permanent", err, router.KindOf(err))
				case i == 2 && !strings.Contains(err.Error(), c.want):
					t.Fatalf("the bad message's error %q does not say %q", err, c.want)
				case i == 2 && !strings.Contains(err.Error(), in.table):
					t.Fatalf("the bad message's error %q does not name the inbox %s", err, in.table)
				case i != 2 && err != nil:
					t.Fatalf("message %d failed beside the bad one: %v", i, err)
				}
			}
			rows := in.rows(t, topic)
			if len(rows) != 4 {
				t.Fatalf("%d rows in the inbox, want the 4 good messages", len(rows))
			}
			for _, r := range rows {
				if r.Headers["seq"] == "2" {
					t.Fatalf("the bad message was inserted: %v", r)
				}
			}
		})
	}
}
