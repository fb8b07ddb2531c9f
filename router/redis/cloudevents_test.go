package redis

import (
	"testing"

	"github.com/outboxd/outboxd/internal/cetest"
	"github.com/outboxd/outboxd/router"
)

var _ router.EventBinding = (*Driver)(nil)

// The SDK for Go has no module for this protocol it can be given here, so the message is
// decoded through its binding layer from the headers named by outboxd's own mapping, the
// HTTP binding's names: attributes in h:ce- fields, datacontenttype in h:content-type.
func TestCloudEventsArriveAsTheSDKDecodesThem(t *testing.T) {
	t.Parallel()
	cetest.Check(t, conformanceHarness(t), cetest.FromHeaders("ce-", "content-type"), cetest.Options{})
}

func TestEachCloudEventsAttributeHasItsBindingsHeader(t *testing.T) {
	t.Parallel()
	cetest.HeaderNames(t, (*Driver)(nil), []cetest.HeaderName{
		{Name: "the id takes the binding's prefix", Attr: "id", Want: "ce-id"},
		{Name: "the type takes the binding's prefix", Attr: "type", Want: "ce-type"},
		{Name: "an extension takes the binding's prefix", Attr: "region", Want: "ce-region"},
		{Name: "the data content type is the content-type header", Attr: "datacontenttype", Want: "content-type"},
	})
}
