package jetstream_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/natsconn"
)

// responder stands in for a stream on subject: it answers each message the driver sends
// with the next of answers (nil: no answer) and records the reply subjects it was given.
type responder struct {
	mu      sync.Mutex
	answers [][]byte
	replies []string
	got     chan string // each reply subject, as it arrives
}

func newResponder(t *testing.T, nc *nats.Conn, subject string, answers ...[]byte) *responder {
	t.Helper()
	r := &responder{answers: answers, got: make(chan string, 100)}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		r.mu.Lock()
		n := len(r.replies)
		r.replies = append(r.replies, m.Reply)
		r.mu.Unlock()
		if n < len(r.answers) && r.answers[n] != nil {
			_ = nc.Publish(m.Reply, r.answers[n])
		}
		r.got <- m.Reply
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server knows the subscription
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

func TestEachAnswerIsReadAsTheClientLibraryReadsIt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer string
		ok     bool
		kind   router.Kind // of a failure
		is     error       // what the failure wraps
		dup    bool        // a success counted as a duplicate
	}{
		{"A PubAck is a success.", `{"stream":"S","seq":1}`, true, 0, nil, false},
		{"A PubAck marked duplicate is a success and counted.", `{"stream":"S","seq":1,"duplicate":true}`, true, 0, nil, true},
		{"A stream at its limit is retryable.", `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`,
			false, router.KindRetryable, &jetstream.APIError{}, false},
		{"A stream that does not match the expected one is permanent.", `{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`,
			false, router.KindPermanent, &jetstream.APIError{}, false},
		// The responder is a core subscriber and no stream captures its subject, which
		// the server confirms: what it answers cannot make the message storable.
		{"An answer that is not JSON, where no stream captures the subject, is permanent.", `not a PubAck`, false, router.KindPermanent, jetstream.ErrInvalidJSAck, false},
		{"An answer without a stream, where no stream captures the subject, is permanent.", `{"seq":4}`, false, router.KindPermanent, jetstream.ErrInvalidJSAck, false},
	}
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			subject := "fake.answer." + string(rune('a'+i))
			newResponder(t, b.nc, subject, []byte(c.answer))
			before := d.Duplicates()
			err := d.Publish(ctx(t), messages(subject, 1, 8))[0]
			var apiErr *jetstream.APIError
			switch wantAPI := errors.As(c.is, new(*jetstream.APIError)); {
			case c.ok && err != nil:
				t.Fatalf("%v, want a success", err)
			case c.ok:
			case err == nil || router.KindOf(err) != c.kind:
				t.Fatalf("kind %s (%v), want %s", router.KindOf(err), err, c.kind)
			case wantAPI && !errors.As(err, &apiErr), !wantAPI && !errors.Is(err, c.is):
				t.Fatalf("%v does not wrap %T %v", err, c.is, c.is)
			case !strings.Contains(err.Error(), "publish to "+subject):
				t.Fatalf("%v does not name the subject", err)
			}
			if dups := d.Duplicates() - before; dups != map[bool]uint64{true: 1}[c.dup] {
				t.Fatalf("%d duplicates counted", dups)
			}
		})
	}
}

func TestAMessageWithoutAPubAckTimesOutAsRetryableAndALatePubAckConfirmsNothing(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const timeout = 300 * time.Millisecond
	d := newDriverWith(t, jsdriver.Options{Options: natsconn.Options{URL: b.srv.URL(), PublishTimeout: timeout}, MaxInFlight: 1})
	silentStream(t, b, "fake.silent")         // a stream captures the subject: the timeout stays retryable
	r := newResponder(t, b.nc, "fake.silent") // never answers

	start := time.Now()
	err := d.Publish(ctx(t), messages("fake.silent", 1, 8))[0]
	elapsed := time.Since(start)
	if router.KindOf(err) != router.KindRetryable || !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("%v (kind %s), want a retryable publish timeout", err, router.KindOf(err))
	}
	if elapsed < timeout || elapsed > 10*timeout {
		t.Fatalf("the timeout came after %v (publish timeout %v)", elapsed, timeout)
	}

	// The PubAck arrives now: it settles nothing, and the window of one came back at the
	// timeout, so the next message goes through.
	late := <-r.got
	if err := b.nc.Publish(late, []byte(`{"stream":"S","seq":1,"duplicate":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	topic := b.topic(t)
	requireNoErrors(t, d.Publish(ctx(t), messages(topic, 3, 8)))
	if n := d.Duplicates(); n != 0 {
		t.Fatalf("the late PubAck counted %d duplicates", n)
	}
}

func TestASubjectNoStreamCapturesIsPublishedThreeTimesBeforeItIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriverWith(t, jsdriver.Options{Options: natsconn.Options{URL: b.srv.URL(), PublishTimeout: 5 * time.Second}})
	err := d.Publish(ctx(t), messages("orphan.thrice", 1, 8))[0]
	if router.KindOf(err) != router.KindPermanent || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("%v (kind %s), want permanent: no stream response", err, router.KindOf(err))
	}
	if sent := driverSent(t, b); sent != 3 {
		t.Fatalf("the driver published %d messages, want 3 (the message and two retries)", sent)
	}
}

func TestAMessageAnsweredNoRespondersIsStoredWhenARetryFindsAStream(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d := newDriver(t, b.srv.URL(), 0)
	done := make(chan error, 1)
	go func() { done <- d.Publish(ctx(t), messages("fake.late", 1, 8))[0] }()
	// Once the server has the first attempt, nobody listens on the subject, so it answers
	// "no responders"; a responder that appears now is there for the retry 250 ms later.
	waitFor(t, func() bool { return driverSent(t, b) >= 1 })
	r := newResponder(t, b.nc, "fake.late", []byte(`{"stream":"S","seq":1}`))
	if err := <-done; err != nil {
		t.Fatalf("%v, want the retry confirmed", err)
	}
	// The server adds a read's messages to a connection's count after it has routed
	// them, so the retry may be confirmed before it is counted.
	waitFor(t, func() bool { return driverSent(t, b) >= 2 })
	if len(r.got) != 1 || driverSent(t, b) != 2 {
		t.Fatalf("the responder got %d messages, the driver sent %d; want 1 and 2", len(r.got), driverSent(t, b))
	}
}

// driverSent is how many messages the driver's connection (named outboxd/test) sent.
func driverSent(t *testing.T, b *broker) int64 {
	t.Helper()
	conns, err := b.srv.Server().Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns.Conns {
		if c.Name == "outboxd/test" {
			return c.InMsgs
		}
	}
	return -1
}

// waitFor polls cond, which reads server state that no event announces, for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
