package postgres

import (
	"testing"

	"github.com/outboxd/outboxd/internal/cetest"
	"github.com/outboxd/outboxd/router"
)

var _ router.EventBinding = (*Driver)(nil)

// The SDK for Go has no module for this protocol it can be given here, so the message is
// decoded through its binding layer from the headers named by outboxd's own mapping, the
// HTTP binding's names: attributes in ce- keys of the headers, datacontenttype in
// content-type.
func TestCloudEventsArriveAsTheSDKDecodesThem(t *testing.T) {
	t.Parallel()
	cetest.Check(t, conformanceHarness(t), cetest.FromHeaders("ce-", "content-type"), cetest.Options{Deduplicates: true})
}

func TestEachCloudEventsAttributeHasItsBindingsHeader(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, attr, want string }{
		{"the id takes the binding's prefix", "id", "ce-id"},
		{"the type takes the binding's prefix", "type", "ce-type"},
		{"an extension takes the binding's prefix", "region", "ce-region"},
		{"the data content type is the content-type header", "datacontenttype", "content-type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := (*Driver)(nil).EventHeader(tc.attr); got != tc.want {
				t.Fatalf("EventHeader(%q) = %q, want %q", tc.attr, got, tc.want)
			}
		})
	}
}
