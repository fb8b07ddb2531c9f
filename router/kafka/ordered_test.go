package kafka

import (
	"slices"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

// A key's messages go to two topics, the first of which does not exist yet; the run is
// published, the topic is created, and the run is published again, as the dispatcher
// does once the refused head is requeued. Each topic must hold the key's messages once
// and in order: nothing of the key was published while its head was refused.
func TestAnOrderedKeyAcrossAMissingTopicIsPublishedOnceInOrderAfterTheTopicIsCreated(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "orders.paid")
	d := newDriver(t, testConfig(k.Addr()))
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "k", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	msgs := numbered("orders.created", 4, "order-1")
	msgs[1].Topic, msgs[3].Topic = "orders.paid", "orders.paid" // created, paid, created, paid

	first := pub.PublishOrdered(testCtx(t), msgs)
	if got, want := kinds(first), []string{"permanent", "held_back", "held_back", "held_back"}; !slices.Equal(got, want) {
		t.Fatalf("with orders.created missing: %v (%v), want %v", got, first, want)
	}

	createTopic(t, k.Addr(), "orders.created", 1)
	for i, err := range pub.PublishOrdered(testCtx(t), msgs) {
		if err != nil {
			t.Fatalf("after creating the topic, message %d: %v", i, err)
		}
	}
	for topic, want := range map[string][]string{"orders.created": {"0", "2"}, "orders.paid": {"1", "3"}} {
		var got []string
		for _, m := range readTopic(t, k.Addr(), topic, len(want))[0] {
			got = append(got, header(m, "seq"))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s holds messages %v, want %v once each, in order", topic, got, want)
		}
	}
}
