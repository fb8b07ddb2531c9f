package webhook_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
)

func TestABadMessageFailsAloneAndPermanentlyWhileItsBatchIsDelivered(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		batch bool
		bad   func(m *router.Message)
		want  string // in the error
	}{
		{"a header name with a space", false, func(m *router.Message) { m.Headers["bad name"] = "x" },
			`header name "bad name" holds ' ' at byte 4`},
		{"a header name with a colon", false, func(m *router.Message) { m.Headers["a:b"] = "x" }, `holds ':' at byte 2`},
		{"a header name that is not ASCII", false, func(m *router.Message) { m.Headers["grüße"] = "x" }, `header name "grüße" holds`},
		{"an empty header name", false, func(m *router.Message) { m.Headers[""] = "x" }, "an empty header name"},
		{"a header value with a line break", false, func(m *router.Message) { m.Headers["x-note"] = "a\r\nInjected: yes" },
			`the value of header x-note holds '\r' at byte 2, which an HTTP header cannot carry`},
		{"a header that frames the request", false, func(m *router.Message) { m.Headers["content-length"] = "5" },
			"header Content-Length describes the HTTP connection"},
		{"a Host header", false, func(m *router.Message) { m.Headers["Host"] = "elsewhere" }, "header Host describes"},
		{"a Transfer-Encoding header", false, func(m *router.Message) { m.Headers["transfer-encoding"] = "chunked" },
			"header Transfer-Encoding describes"},
		{"a key with a line break", false, func(m *router.Message) { m.Key = []byte("k\n1") },
			`the key holds '\n' at byte 2, which an HTTP header cannot carry (it is sent as a header); batch mode carries any key`},
		{"a topic with a control character", false, func(m *router.Message) { m.Topic = "orders\x00" }, `the topic holds '\x00' at byte 7`},
		{"a producer's message id with a line break", false, func(m *router.Message) { m.MessageID = "id\n2" }, "the message id holds"},
		{"a payload above max_payload_bytes", false, func(m *router.Message) { m.Payload = make([]byte, 1<<20+1) },
			"the payload takes 1048577 bytes and max_payload_bytes is 1048576"},
		{"no topic for a URL that needs one", false, func(m *router.Message) { m.Topic = "" }, "the message has no topic"},
		{"a topic that makes the URL too long", false, func(m *router.Message) { m.Topic = strings.Repeat("t", 9000) },
			"the URL would take"},
		{"in batch mode, a header value that is not UTF-8", true, func(m *router.Message) { m.Headers["x-note"] = "\xff" },
			`header "x-note" is not valid UTF-8, which a JSON batch cannot carry`},
		{"in batch mode, a header name that is not UTF-8", true, func(m *router.Message) { m.Headers["x-\xfe"] = "v" },
			"is not valid UTF-8"},
		{"in batch mode, a topic that is not UTF-8", true, func(m *router.Message) { m.Topic = "orders\xff" },
			"the topic is not valid UTF-8"},
		{"in batch mode, a payload above max_payload_bytes", true, func(m *router.Message) { m.Payload = make([]byte, 1<<20+1) },
			"max_payload_bytes is 1048576"},
		{"in batch mode, no topic for a URL that needs one", true, func(m *router.Message) { m.Topic = "" }, "the message has no topic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, c.batch)
			d := newDriver(t, options(s.url(), c.batch))
			msgs := messages("orders", 5, 5)
			const bad = 2
			c.bad(&msgs[bad])
			errs := d.Publish(testCtx(t), msgs)
			for i, err := range errs {
				switch {
				case i == bad && router.KindOf(err) != router.KindPermanent:
					t.Fatalf("the bad message: %v (%s), want permanent", err, router.KindOf(err))
				case i == bad && !strings.Contains(err.Error(), c.want):
					t.Fatalf("the bad message's error %q does not say %q", err, c.want)
				case i == bad && len(err.Error()) > 600:
					t.Fatalf("the error quotes too much: %d bytes", len(err.Error()))
				case i != bad && err != nil:
					t.Fatalf("message %d failed beside the bad one: %v", i, err)
				}
			}
			for _, r := range s.receive(t, "orders", 4) {
				if r.Headers["seq"] == strconv.Itoa(bad) {
					t.Fatal("the bad message was sent")
				}
			}
		})
	}
}

func TestBatchModeCarriesAKeyNoHeaderCould(t *testing.T) {
	t.Parallel()
	s := newSink(t, true)
	d := newDriver(t, options(s.url(), true))
	msgs := messages("orders", 2, 2)
	msgs[1].Key = []byte("k\n\x00\xff")
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	if got := s.receive(t, "orders", 2); string(got[1].Key) != "k\n\x00\xff" {
		t.Fatalf("key arrived as %q", got[1].Key)
	}
}
