package rabbitmq

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
)

func TestABadMessageFailsAlonePermanentlyWithItsReason(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	o := testOptions(brokerURL(), b.exchange)
	o.MaxMessageBytes = 1 << 10
	d := newDriver(t, o)
	topic := b.topic(t)
	long := strings.Repeat("k", 256)
	cases := []struct {
		name string
		bad  func(m *router.Message)
		want string
	}{
		{"a routing key over 255 bytes", func(m *router.Message) { m.Topic = long },
			`rabbitmq: routing key "` + long[:60] + `"… is 256 bytes; AMQP allows at most 255`},
		{"a routing key no queue is bound to", func(m *router.Message) { m.Topic = topic + ".nowhere" },
			`has no queue bound for routing key "` + topic + `.nowhere" (NO_ROUTE)`},
		{"an empty header name", func(m *router.Message) { m.Headers[""] = "v" },
			`rabbitmq: header name "" is empty`},
		{"a header name over 255 bytes", func(m *router.Message) { m.Headers[long] = "v" },
			"is 256 bytes; AMQP allows at most 255"},
		{"a header name that is not UTF-8", func(m *router.Message) { m.Headers["caf\xe9"] = "v" },
			`header name "caf\xe9" is not valid UTF-8`},
		{"a message id over 255 bytes", func(m *router.Message) { m.MessageID = long },
			"the AMQP message_id property holds at most 255"},
		{"a content type over 255 bytes", func(m *router.Message) { m.Headers["Content-Type"] = long },
			"the content-type header is 256 bytes; the AMQP content_type property holds at most 255"},
		{"a payload over max_message_bytes", func(m *router.Message) { m.Payload = make([]byte, 1<<10+1) },
			"the payload is 1025 bytes and max_message_bytes is 1024"},
		{"headers larger than one frame", func(m *router.Message) { m.Headers["big"] = strings.Repeat("v", 200<<10) },
			"one AMQP frame holds 131072 (the connection's frame_max)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msgs := numbered(topic, 4, "a")
			const bad = 1
			c.bad(&msgs[bad])
			checked := d.Check(&msgs[bad])
			errs := d.Publish(testCtx(t), msgs)
			for i, err := range errs {
				switch {
				case i == bad && (router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), c.want)):
					t.Fatalf("the bad message: %v (%s); want permanent, saying %q", err, router.KindOf(err), c.want)
				case i == bad && len(err.Error()) > 400:
					t.Fatalf("the error quotes the whole value: %d bytes", len(err.Error()))
				case i != bad && err != nil:
					t.Fatalf("message %d beside the bad one: %v", i, err)
				}
			}
			// Check refuses before sending what it can know; a missing route only the broker knows.
			if strings.Contains(c.want, "NO_ROUTE") {
				if checked != nil {
					t.Fatalf("Check refused a routable-looking message: %v", checked)
				}
			} else if checked == nil || checked.Error() != errs[bad].Error() {
				t.Fatalf("Check said %v; Publish said %v", checked, errs[bad])
			}
			for _, got := range b.deliveries(t, topic, 3) {
				if string(got.Body) == "a-1" {
					t.Fatal("the bad message arrived")
				}
			}
		})
	}
}

func TestAHeaderFrameJustWithinFrameMaxIsDelivered(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	d := newDriver(t, testOptions(brokerURL(), b.exchange))
	topic := b.topic(t)
	requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 1, "connect"))) // frame_max is negotiated
	m := numbered(topic, 1, "a")[0]
	m.Headers["big"] = ""
	room := d.frameMax() - headerFrameBytes(&m)
	m.Headers["big"] = strings.Repeat("v", room)
	if err := d.Check(&m); err != nil {
		t.Fatalf("a header frame of exactly frame_max: %v", err)
	}
	requireDelivered(t, d.Publish(testCtx(t), []router.Message{m}))
	b.deliveries(t, topic, 2)
	m.Headers["big"] += "v"
	if err := d.Check(&m); router.KindOf(err) != router.KindPermanent {
		t.Fatalf("a header frame one byte over frame_max: %v", err)
	}
}
