package jetstream_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
)

func TestProvisionCreatesTheMissingStreamSoTheFirstMessageIsStored(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	p := jsdriver.DefaultOptions().Provision
	p.Enabled, p.Stream, p.Storage, p.DuplicateWindow = true, "SHOP", "memory", 90*time.Second

	// Without it, a fresh server has no stream and the first message fails for good.
	if err := d.Publish(ctx(t), messages("shop.orders.created", 1, 8))[0]; router.KindOf(err) != router.KindPermanent {
		t.Fatalf("before provisioning: %v (%s), want permanent", err, router.KindOf(err))
	}
	if created, err := d.Provision(ctx(t), p, []string{"shop.>"}); err != nil || !created {
		t.Fatalf("Provision: created %v, %v; want created", created, err)
	}
	requireNoErrors(t, d.Publish(ctx(t), messages("shop.orders.created", 2, 8)))
	s, err := b.js.Stream(ctx(t), "SHOP")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.Storage != jetstream.MemoryStorage || c.Duplicates != 90*time.Second || c.Retention != jetstream.LimitsPolicy || info.State.Msgs != 2 {
		t.Fatalf("stream %+v holding %d messages, want memory storage, a 90s duplicate window, limits retention and 2 messages", c, info.State.Msgs)
	}
	// A second start finds it and changes nothing.
	if created, err := d.Provision(ctx(t), p, []string{"shop.>"}); err != nil || created {
		t.Fatalf("Provision again: created %v, %v; want found, not created", created, err)
	}
}

func TestProvisionLeavesAnExistingStreamAndSaysWhyItCannotCreateOne(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	topic := b.topic(t) // a stream of another name captures this subject
	p := jsdriver.DefaultOptions().Provision
	p.Enabled, p.Stream = true, "OVERLAP"
	_, err := d.Provision(ctx(t), p, []string{topic})
	if err == nil || !strings.Contains(err.Error(), `provision JetStream stream "OVERLAP"`) || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("Provision over a captured subject: %v, want an error naming the stream and the overlap", err)
	}
}
