package router_test

import (
	"context"
	"testing"

	"github.com/outboxd/outboxd/router"
)

// topicsDriver records the topic of every message it is asked to publish.
type topicsDriver struct{ topics []string }

func (d *topicsDriver) Publish(_ context.Context, msgs []router.Message) []error {
	for _, m := range msgs {
		d.topics = append(d.topics, m.Topic)
	}
	return make([]error, len(msgs))
}

func (*topicsDriver) Close() error { return nil }

func TestTheRouterPrefixesTheRowsTopicOnBothPublishPaths(t *testing.T) {
	t.Parallel()
	d := &topicsDriver{}
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "d", Driver: d, TopicPrefix: "shop."}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []router.Message{{ID: 1, Topic: "created"}, {ID: 2, Topic: "paid", Key: []byte("k")}}
	p.Publish(context.Background(), msgs)
	p.PublishOrdered(context.Background(), msgs)
	want := []string{"shop.created", "shop.paid", "shop.created", "shop.paid"}
	if len(d.topics) != len(want) {
		t.Fatalf("driver saw topics %q, want %q", d.topics, want)
	}
	for i := range want {
		if d.topics[i] != want[i] {
			t.Fatalf("driver saw topics %q, want %q", d.topics, want)
		}
	}
	if msgs[0].Topic != "created" || msgs[1].Topic != "paid" {
		t.Fatalf("the caller's messages were changed: %+v", msgs)
	}
}
