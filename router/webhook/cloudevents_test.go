package webhook_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/outboxd/outboxd/internal/cetest"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
	"github.com/outboxd/outboxd/router/webhook"
)

var _ router.EventBinding = (*webhook.Driver)(nil)

// Per message, the request is read by the SDK's own HTTP binding. In batch mode each
// element carries the same ce- headers, read through the SDK's binding layer.
func TestCloudEventsArriveAsTheSDKDecodesThem(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		name, decode, o := "per message", sdkHTTP, cetest.Options{DefaultContentType: "application/octet-stream"}
		if batch {
			name, decode, o = "batch", cetest.FromHeaders("ce-", "content-type"), cetest.Options{}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, batch)
			h := &routertest.Harness{
				Driver:  newDriver(t, options(s.url(), batch)),
				Topic:   func(*testing.T) string { return "events." + strconv.FormatUint(rand.Uint64(), 36) },
				Receive: s.receive,
			}
			cetest.Check(t, h, decode, o)
		})
	}
}

// sdkHTTP decodes a request as the SDK's HTTP protocol binding reads it.
func sdkHTTP(r routertest.Received) (*event.Event, error) {
	h := http.Header{}
	for k, v := range r.Headers {
		h.Set(k, v)
	}
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(r.Payload)))
	return binding.ToEvent(context.Background(), msg)
}

func TestEachCloudEventsAttributeHasItsBindingsHeader(t *testing.T) {
	t.Parallel()
	cetest.HeaderNames(t, (*webhook.Driver)(nil), []cetest.HeaderName{
		{Name: "the id takes the binding's prefix", Attr: "id", Want: "ce-id"},
		{Name: "the type takes the binding's prefix", Attr: "type", Want: "ce-type"},
		{Name: "an extension takes the binding's prefix", Attr: "region", Want: "ce-region"},
		{Name: "the data content type is the content-type header", Attr: "datacontenttype", Want: "content-type"},
	})
}
