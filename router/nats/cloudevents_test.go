package nats_test

import (
	"testing"

	"github.com/outboxd/outboxd/internal/cetest"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/nats"
)

var _ router.EventBinding = (*nats.Driver)(nil)

// The SDK for Go has no module for this protocol it can be given here, so the message is
// decoded through its binding layer from the headers named by the NATS protocol binding
// (1.0.1 and later): attributes in ce- headers, datacontenttype in content-type.
func TestCloudEventsArriveAsTheSDKDecodesThem(t *testing.T) {
	t.Parallel()
	cetest.Check(t, conformanceHarness(t), cetest.FromHeaders("ce-", "content-type"), cetest.Options{})
}

func TestEachCloudEventsAttributeHasItsBindingsHeader(t *testing.T) {
	t.Parallel()
	cetest.HeaderNames(t, (*nats.Driver)(nil), []cetest.HeaderName{
		{Name: "the id takes the binding's prefix", Attr: "id", Want: "ce-id"},
		{Name: "the type takes the binding's prefix", Attr: "type", Want: "ce-type"},
		{Name: "an extension takes the binding's prefix", Attr: "region", Want: "ce-region"},
		{Name: "the data content type is the content-type header", Attr: "datacontenttype", Want: "content-type"},
	})
}
