package jetstream_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/natsconn"
)

// silentStream creates a stream capturing subject that stores what is published to it
// and sends no PubAck (NoAck), so that only a test's responder answers there.
func silentStream(t *testing.T, b *broker, subject string) {
	t.Helper()
	name := "SILENT_" + strings.NewReplacer(".", "_", "*", "_", ">", "_").Replace(subject)
	if _, err := b.js.CreateStream(ctx(t), jetstream.StreamConfig{Name: name, Subjects: []string{subject}, NoAck: true, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("create silent stream for %s: %v", subject, err)
	}
}

func TestASubjectNoStreamCapturesIsPermanentWhateverACoreSubscriberThereAnswers(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const timeout = 300 * time.Millisecond
	d := newDriverWith(t, jsdriver.Options{Options: natsconn.Options{URL: b.srv.URL(), PublishTimeout: timeout}})
	cases := []struct {
		name    string
		subject string
		answer  []byte // nil: the subscriber never answers
		stream  bool   // a stream (that sends no PubAck) captures the subject too
		want    router.Kind
		is      error
	}{
		{"a subscriber's own reply where no stream captures the subject is permanent", "shop.orders.created", []byte("thanks"), false, router.KindPermanent, jetstream.ErrInvalidJSAck},
		{"an empty reply where no stream captures the subject is permanent", "shop.orders.paid", []byte{}, false, router.KindPermanent, jetstream.ErrInvalidJSAck},
		{"a subscriber that never answers where no stream captures the subject is permanent", "shop.orders.shipped", nil, false, router.KindPermanent, jetstream.ErrAsyncPublishTimeout},
		{"a subscriber's reply where a stream does capture the subject stays retryable", "shop.carts.created", []byte("thanks"), true, router.KindRetryable, jetstream.ErrInvalidJSAck},
		{"no answer where a stream does capture the subject stays retryable", "shop.carts.paid", nil, true, router.KindRetryable, jetstream.ErrAsyncPublishTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.stream {
				silentStream(t, b, c.subject)
			}
			if c.answer != nil {
				newResponder(t, b.nc, c.subject, c.answer)
			} else {
				newResponder(t, b.nc, c.subject)
			}
			err := d.Publish(ctx(t), messages(c.subject, 1, 8))[0]
			if k := router.KindOf(err); err == nil || k != c.want || !errors.Is(err, c.is) {
				t.Fatalf("%v (kind %s), want %s wrapping %v", err, k, c.want, c.is)
			}
			if want := "no JetStream stream captures subject " + c.subject; c.want == router.KindPermanent && !strings.Contains(err.Error(), want) {
				t.Fatalf("%q does not say %q", err, want)
			}
		})
	}
}
