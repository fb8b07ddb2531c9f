package router_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
)

// eventDriver records what it is given and names headers as the HTTP binding does,
// with an "x-" prefix so that a header left unrenamed shows.
type eventDriver struct{ got []router.Message }

func (d *eventDriver) Publish(_ context.Context, msgs []router.Message) []error {
	d.got = append(d.got, msgs...)
	return make([]error, len(msgs))
}

func (*eventDriver) Close() error { return nil }

func (*eventDriver) EventHeader(attr string) string { return "x-" + attr }

var created = time.Date(2026, 5, 1, 12, 30, 0, 250_000_000, time.FixedZone("CEST", 2*3600))

func eventPublisher(t *testing.T, ce router.CloudEvents, d router.Driver) *router.Publisher {
	t.Helper()
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "d", Driver: d, CloudEvents: &ce}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestACloudEventsStreamSendsTheAttributesUnderTheBindingsHeaderNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cfg     router.CloudEvents
		key     []byte
		headers map[string]string
		want    map[string]string
	}{
		{
			name:    "type and source come from the stream when the row has none",
			cfg:     router.CloudEvents{Type: "shop.order.placed", Source: "/shop"},
			headers: map[string]string{"tenant": "t1"},
			want: map[string]string{"x-id": "dedup-1", "x-source": "/shop", "x-type": "shop.order.placed",
				"x-specversion": "1.0", "x-time": "2026-05-01T10:30:00.25Z", "tenant": "t1"},
		},
		{
			name: "the row's headers win over the stream's, in any case",
			cfg:  router.CloudEvents{Type: "default.type", Source: "/shop"},
			headers: map[string]string{"Ce-Type": "row.type", "ce-source": "urn:row", "Content-Type": "application/json",
				"ce-traceparent": "00-abc", "CE-TIME": "2020-01-02T03:04:05Z"},
			want: map[string]string{"x-id": "dedup-1", "x-source": "urn:row", "x-type": "row.type", "x-specversion": "1.0",
				"x-time": "2020-01-02T03:04:05Z", "x-datacontenttype": "application/json", "x-traceparent": "00-abc"},
		},
		{
			name: "the source defaults to the stream's path and the subject to the key when asked",
			cfg:  router.CloudEvents{Type: "t", SubjectFromKey: true},
			key:  []byte("order-7"),
			want: map[string]string{"x-id": "dedup-1", "x-source": "/outboxd/orders", "x-type": "t", "x-specversion": "1.0",
				"x-time": "2026-05-01T10:30:00.25Z", "x-subject": "order-7"},
		},
		{
			name:    "a subject header wins over the key",
			cfg:     router.CloudEvents{Type: "t", SubjectFromKey: true},
			key:     []byte("order-7"),
			headers: map[string]string{"ce-subject": "line-3"},
			want: map[string]string{"x-id": "dedup-1", "x-source": "/outboxd/orders", "x-type": "t", "x-specversion": "1.0",
				"x-time": "2026-05-01T10:30:00.25Z", "x-subject": "line-3"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &eventDriver{}
			p := eventPublisher(t, tc.cfg, d)
			in := []router.Message{{ID: 1, Topic: "o", Key: tc.key, Headers: tc.headers, RowDedupID: "dedup-1", CreatedAt: created}}
			before := maps.Clone(tc.headers)
			if errs := p.Publish(context.Background(), in); errs[0] != nil {
				t.Fatalf("publish: %v", errs[0])
			}
			if got := d.got[0].Headers; !maps.Equal(got, tc.want) {
				t.Fatalf("headers %v\nwant    %v", got, tc.want)
			}
			if !maps.Equal(in[0].Headers, before) {
				t.Fatalf("the caller's headers changed: %v, were %v", in[0].Headers, before)
			}
		})
	}
}

func TestARowThatCannotBeACloudEventFailsForGoodAndTheRestGoOut(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cfg     router.CloudEvents
		headers map[string]string
		reason  string
	}{
		{"a row without a type on a stream without one", router.CloudEvents{}, nil, "has no event type: set the row header ce-type"},
		{"an extension name with an underscore", router.CloudEvents{Type: "t"}, map[string]string{"ce-trace_id": "x"}, "only the letters a-z and digits"},
		{"an extension name longer than twenty characters", router.CloudEvents{Type: "t"}, map[string]string{"ce-abcdefghijklmnopqrstu": "x"}, "at most 20 characters"},
		{"an id header", router.CloudEvents{Type: "t"}, map[string]string{"ce-id": "mine"}, "set message_id to choose it"},
		{"a specversion header", router.CloudEvents{Type: "t"}, map[string]string{"ce-specversion": "0.3"}, "outboxd sets specversion"},
		{"a time that is not RFC 3339", router.CloudEvents{Type: "t"}, map[string]string{"ce-time": "yesterday"}, "must be an RFC 3339 timestamp"},
		{"a relative data schema", router.CloudEvents{Type: "t"}, map[string]string{"ce-dataschema": "schema.json"}, "must be an absolute URI"},
		{"a source with a space", router.CloudEvents{Type: "t"}, map[string]string{"ce-source": "my shop"}, "must be a URI-reference"},
		{"an empty extension", router.CloudEvents{Type: "t"}, map[string]string{"ce-region": ""}, "row header \"ce-region\" is empty"},
		{"one attribute twice in two cases", router.CloudEvents{Type: "t"}, map[string]string{"ce-region": "a", "CE-REGION": "b"}, "set by two row headers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, ordered := range []bool{false, true} {
				d := &eventDriver{}
				p := eventPublisher(t, tc.cfg, d)
				in := []router.Message{
					{ID: 1, Topic: "o", Key: []byte("k"), Headers: tc.headers, CreatedAt: created},
					{ID: 2, Topic: "o", Key: []byte("other"), Headers: map[string]string{"ce-type": "fine"}, CreatedAt: created},
				}
				var errs []error
				if ordered {
					errs = p.PublishOrdered(context.Background(), in)
				} else {
					errs = p.Publish(context.Background(), in)
				}
				if router.KindOf(errs[0]) != router.KindPermanent || !strings.Contains(errs[0].Error(), tc.reason) {
					t.Fatalf("ordered=%t: first message's error %v; want a permanent one saying %q", ordered, errs[0], tc.reason)
				}
				if errs[1] != nil || len(d.got) != 1 || d.got[0].ID != 2 {
					t.Fatalf("ordered=%t: second message's error %v, driver got %d messages; want it sent alone", ordered, errs[1], len(d.got))
				}
			}
		})
	}
}

func TestTheEventIDIsTheSameOnEveryPublishOfARow(t *testing.T) {
	t.Parallel()
	d := &eventDriver{}
	p := eventPublisher(t, router.CloudEvents{Type: "t"}, d)
	row := router.Message{ID: 9, Topic: "o", RowDedupID: "r-9", CreatedAt: created}
	p.Publish(context.Background(), []router.Message{row})
	row.Attempts = 1
	p.Publish(context.Background(), []router.Message{row})
	if a, b := d.got[0].Headers["x-id"], d.got[1].Headers["x-id"]; a != "r-9" || b != a {
		t.Fatalf("ids %q and %q; want r-9 twice", a, b)
	}
}

func TestACloudEventsRouteNeedsADriverWithABinding(t *testing.T) {
	t.Parallel()
	_, err := router.New([]router.Route{{Stream: "orders", DriverName: "plain", Driver: &topicsDriver{}, CloudEvents: &router.CloudEvents{Type: "t"}}})
	if err == nil || !strings.Contains(err.Error(), "driver plain has no CloudEvents binding") {
		t.Fatalf("router.New: %v; want the driver named as having no binding", err)
	}
}

// Whatever a row's headers hold, a cloudevents stream either sends the message with
// every required attribute or fails it for good; it never panics or sends half an event.
func FuzzCloudEventsHeaders(f *testing.F) {
	f.Add("ce-type", "t", "ce-region", "eu")
	f.Add("Ce-Source", "my shop", "content-type", "")
	f.Add("ce-", "x", "CE-TIME", "2020-01-01T00:00:00Z")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		d := &eventDriver{}
		p := eventPublisher(t, router.CloudEvents{}, d)
		errs := p.Publish(context.Background(), []router.Message{{ID: 1, Topic: "o", Headers: map[string]string{k1: v1, k2: v2}, CreatedAt: created}})
		if errs[0] != nil {
			if router.KindOf(errs[0]) != router.KindPermanent || len(d.got) != 0 {
				t.Fatalf("error %v (kind %s) with %d messages sent; want a permanent error and none", errs[0], router.KindOf(errs[0]), len(d.got))
			}
			return
		}
		h := d.got[0].Headers
		for _, a := range []string{"x-id", "x-source", "x-type", "x-specversion", "x-time"} {
			if h[a] == "" {
				t.Fatalf("sent without %s: %v", a, h)
			}
		}
	})
}
