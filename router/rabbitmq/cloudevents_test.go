package rabbitmq

import (
	"testing"

	"github.com/outboxd/outboxd/internal/cetest"
	"github.com/outboxd/outboxd/router"
)

var _ router.EventBinding = (*Driver)(nil)

// The SDK for Go has no module for this protocol it can be given here, so the message is
// decoded through its binding layer from the headers named by the AMQP protocol binding:
// attributes in cloudEvents: application properties (headers), datacontenttype in
// content-type.
func TestCloudEventsArriveAsTheSDKDecodesThem(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	cetest.Check(t, conformanceHarness(t), cetest.FromHeaders("cloudEvents:", "content-type"), cetest.Options{})
}

func TestEachCloudEventsAttributeHasItsBindingsHeader(t *testing.T) {
	t.Parallel()
	cetest.HeaderNames(t, (*Driver)(nil), []cetest.HeaderName{
		{Name: "the id takes the binding's prefix", Attr: "id", Want: "cloudEvents:id"},
		{Name: "the type takes the binding's prefix", Attr: "type", Want: "cloudEvents:type"},
		{Name: "an extension takes the binding's prefix", Attr: "region", Want: "cloudEvents:region"},
		{Name: "the data content type is the content-type header", Attr: "datacontenttype", Want: "content-type"},
	})
}
