package rabbitmq

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

func kinds(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = "ok"
		if err != nil {
			out[i] = router.KindOf(err).String()
		}
	}
	return out
}

func requireDelivered(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func TestAMessageArrivesWithItsPropertiesAndHeaders(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "direct")
	d := newDriver(t, testOptions(brokerURL(), b.exchange))
	topic := b.topic(t)
	m := router.Message{ID: 42, Stream: "orders", Topic: topic, Key: []byte("customer-7"), Payload: []byte(`{"a":1}`),
		Headers:    map[string]string{"Content-Type": "application/json", "trace": "t-1"},
		RowDedupID: "dedup-" + suffix()}
	before := time.Now().Add(-time.Second)
	requireDelivered(t, d.Publish(testCtx(t), []router.Message{m}))
	got := b.deliveries(t, topic, 1)[0]
	want := map[string]string{"Content-Type": "application/json", "trace": "t-1", router.HeaderID: "42",
		router.HeaderStream: "orders", router.HeaderMessageID: m.RowDedupID, router.HeaderKey: "customer-7"}
	if r := received(got); !mapsEqual(r.Headers, want) {
		t.Errorf("headers %v, want %v", r.Headers, want)
	}
	switch {
	case got.MessageId != m.RowDedupID:
		t.Errorf("message_id %q, want the dedup id %q", got.MessageId, m.RowDedupID)
	case got.ContentType != "application/json":
		t.Errorf("content_type %q, want the content-type header's value", got.ContentType)
	case got.DeliveryMode != amqp.Persistent:
		t.Errorf("delivery_mode %d, want persistent", got.DeliveryMode)
	case got.Timestamp.Before(before.Truncate(time.Second)) || got.Timestamp.After(time.Now().Add(time.Second)):
		t.Errorf("timestamp %v, want about now", got.Timestamp)
	case string(got.Body) != `{"a":1}` || got.RoutingKey != topic || got.Exchange != b.exchange:
		t.Errorf("arrived as exchange %q, routing key %q, body %q", got.Exchange, got.RoutingKey, got.Body)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestAnUnroutableMessageFailsPermanentlyNamingExchangeAndKey(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	d := newDriver(t, testOptions(brokerURL(), b.exchange))
	topic := b.topic(t)
	msgs := numbered(topic, 5, "a")
	msgs[1].Topic, msgs[3].Topic = "nowhere.1", "nowhere.3"
	msgs[3].RowDedupID = msgs[2].RowDedupID // a return is matched by routing key as well as by id
	errs := d.Publish(testCtx(t), msgs)
	if k := kinds(errs); !slices.Equal(k, []string{"ok", "permanent", "ok", "permanent", "ok"}) {
		t.Fatalf("kinds %v (%v)", k, errs)
	}
	want := `rabbitmq: exchange "` + b.exchange + `" has no queue bound for routing key "nowhere.3" (NO_ROUTE)`
	if got := errs[3].Error(); !strings.HasSuffix(got, want) {
		t.Fatalf("error %q, want it to end %q", got, want)
	}
	var e *amqp.Error
	if !errors.As(errs[1], &e) || e.Code != amqp.NoRoute {
		t.Fatalf("error %v does not carry the broker's NO_ROUTE", errs[1])
	}
	if got := len(b.deliveries(t, topic, 3)); got != 3 {
		t.Fatalf("%d delivered", got)
	}
}

func TestTheDefaultExchangeRoutesByQueueName(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "")
	d := newDriver(t, testOptions(brokerURL(), ""))
	queue := b.bind("outboxd-test-q-" + suffix())
	msgs := numbered(queue, 3, "a")
	msgs[2].Topic = "outboxd-test-no-such-queue-" + suffix()
	errs := d.Publish(testCtx(t), msgs)
	if k := kinds(errs); !slices.Equal(k, []string{"ok", "ok", "permanent"}) {
		t.Fatalf("kinds %v (%v)", k, errs)
	}
	if want := `rabbitmq: the default exchange has no queue named "` + msgs[2].Topic + `" (NO_ROUTE)`; !strings.HasSuffix(errs[2].Error(), want) {
		t.Fatalf("error %q, want it to end %q", errs[2], want)
	}
	b.deliveries(t, queue, 2)
}

func TestAMissingExchangeFailsPermanentlyAndTheDriverKeepsWorking(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "")
	missing := "outboxd-test-missing-" + suffix()
	d := newDriver(t, testOptions(brokerURL(), missing))
	msgs := numbered("orders.created", 4, "a")
	for i, err := range d.Publish(testCtx(t), msgs) {
		if router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), "NOT_FOUND - no exchange '"+missing+"'") {
			t.Fatalf("message %d to a missing exchange: %v (%s); want permanent NOT_FOUND naming it", i, err, router.KindOf(err))
		}
	}
	// The broker closed the channel; the connection and the driver live on.
	b.exchange = missing
	b.declareExchange(missing, "topic")
	b.bind("orders.created")
	requireDelivered(t, d.Publish(testCtx(t), numbered("orders.created", 4, "b")))
	if got := b.deliveries(t, "orders.created", 4); string(got[0].Body) != "b-0" {
		t.Fatalf("first delivered %q", got[0].Body)
	}
}

func TestAMessageTheBrokerClosesTheChannelForFailsAloneAndPermanently(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	d := newDriver(t, testOptions(brokerURL(), b.exchange))
	topic := b.topic(t)
	msgs := numbered(topic, 6, "a")
	const bad = 2
	d.tweak = func(m *router.Message, p *amqp.Publishing) {
		if m.RowDedupID == msgs[bad].RowDedupID {
			p.UserId = "not-the-user-we-log-in-as" // PRECONDITION_FAILED: it closes the channel
		}
	}
	errs := d.Publish(testCtx(t), msgs)
	for i, err := range errs {
		switch {
		case i == bad && (router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), "PRECONDITION_FAILED")):
			t.Fatalf("the refused message: %v (%s); want permanent PRECONDITION_FAILED", err, router.KindOf(err))
		case i != bad && err != nil:
			t.Fatalf("message %d beside the refused one: %v", i, err)
		}
	}
	for _, got := range b.deliveries(t, topic, 5) {
		if string(got.Body) == "a-2" {
			t.Fatal("the refused message arrived")
		}
	}
}

func TestAnOrderedPublishSendsNothingOfAKeyAfterARefusedMessage(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	d := newDriver(t, testOptions(brokerURL(), b.exchange))
	topic := b.topic(t)
	msgs := numbered(topic, 9, "a") // keys 0,1,2,0,1,2,0,1,2, all to one routing key
	const refused = 4
	// Refused by the broker, for a property, not its destination: the router cannot
	// tell it apart before sending, so the driver must not send message 7 (its key's
	// next) until message 4 is answered.
	d.tweak = func(m *router.Message, p *amqp.Publishing) {
		if m.RowDedupID == msgs[refused].RowDedupID {
			p.UserId = "not-the-user-we-log-in-as"
		}
	}
	rt, err := router.New([]router.Route{{Stream: "test", DriverName: "rabbit", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("test")
	if err != nil {
		t.Fatal(err)
	}
	errs := pub.PublishOrdered(testCtx(t), msgs)
	want := []string{"ok", "ok", "ok", "ok", "permanent", "ok", "ok", "held_back", "ok"}
	if k := kinds(errs); !slices.Equal(k, want) {
		t.Fatalf("kinds %v, want %v (%v)", k, want, errs)
	}
	// The broker closing the channel may take the acks of messages 3 and 5 with it: they
	// are published again (at least once), the copy right behind the original.
	byKey := map[string][]string{}
	var total int
	for total < 7 {
		got := b.deliveries(t, topic, 1)[0]
		key, seq := got.Headers[router.HeaderKey].(string), got.Headers["seq"].(string)
		if n := len(byKey[key]); n == 0 || byKey[key][n-1] != seq {
			byKey[key] = append(byKey[key], seq)
			total++
		}
	}
	for key, want := range map[string][]string{"key-0": {"0", "3", "6"}, "key-1": {"1"}, "key-2": {"2", "5", "8"}} {
		if !slices.Equal(byKey[key], want) {
			t.Fatalf("%s arrived as %v, want %v", key, byKey[key], want)
		}
	}
}

func TestADroppedConnectionIsReopenedOnTheNextPublish(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	p := newProxy(t, brokerAddr(t))
	d := newDriver(t, testOptions(p.url(), b.exchange))
	topic := b.topic(t)
	requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 3, "a")))

	p.cut()
	// The first publish after the cut may find out about it: then nothing of it is
	// confirmed and it costs no attempt. The next one goes out on a new connection.
	if errs := d.Publish(testCtx(t), numbered(topic, 3, "b")); errs[0] != nil {
		for i, err := range errs {
			if router.KindOf(err) != router.KindUnreachable {
				t.Fatalf("message %d after the connection dropped: %v (%s), want unreachable", i, err, router.KindOf(err))
			}
		}
		requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 3, "b")))
	}
	b.deliveries(t, topic, 6)
}

func TestAConnectionLostWhileAwaitingConfirmsIsUnreachable(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	p := newProxy(t, brokerAddr(t))
	d := newDriver(t, testOptions(p.url(), b.exchange))
	topic := b.topic(t)
	requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 1, "warm-up")))

	p.holdReplies()
	done := make(chan []error)
	go func() { done <- d.Publish(testCtx(t), numbered(topic, 4, "a")) }()
	<-p.sent // the batch went out; its confirms are held
	p.cut()
	for i, err := range <-done {
		if router.KindOf(err) != router.KindUnreachable || !strings.Contains(err.Error(), "connection lost") {
			t.Fatalf("message %d: %v (%s); want unreachable, connection lost", i, err, router.KindOf(err))
		}
	}
	p.release()
	requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 2, "b")))
}

func TestNoConfirmWithinThePublishTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	p := newProxy(t, brokerAddr(t))
	o := testOptions(p.url(), b.exchange)
	o.PublishTimeout = 300 * time.Millisecond
	d := newDriver(t, o)
	topic := b.topic(t)
	requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 1, "warm-up")))

	p.holdReplies()
	start := time.Now()
	errs := d.Publish(testCtx(t), numbered(topic, 3, "a"))
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("publish took %v with a 300ms publish_timeout", elapsed)
	}
	for i, err := range errs {
		if router.KindOf(err) != router.KindRetryable || !strings.Contains(err.Error(), "no confirm within publish_timeout (300ms)") {
			t.Fatalf("message %d: %v (%s); want retryable, no confirm", i, err, router.KindOf(err))
		}
	}
	p.release()
	requireDelivered(t, publishOnceReachable(t, d, numbered(topic, 2, "b")))
}

func TestAPublishStuckWritingIsFreedSoonAfterItsTimeout(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	p := newProxy(t, brokerAddr(t))
	o := testOptions(p.url(), b.exchange)
	o.PublishTimeout = 300 * time.Millisecond
	d := newDriver(t, o)
	topic := b.topic(t)
	requireDelivered(t, d.Publish(testCtx(t), numbered(topic, 1, "warm-up")))

	p.stallUploads()
	msgs := numbered(topic, 1, "a")
	msgs[0].Payload = make([]byte, 32<<20) // more than the socket buffers hold
	start := time.Now()
	errs := d.Publish(testCtx(t), msgs)
	if elapsed := time.Since(start); elapsed > 300*time.Millisecond+stuckSend+time.Second {
		t.Fatalf("a publish stuck writing returned after %v", elapsed)
	}
	if k := router.KindOf(errs[0]); k != router.KindRetryable {
		t.Fatalf("the stuck message: %v (%s), want retryable", errs[0], k)
	}
	p.release()
	// The stuck connection was closed; the next publish dials again.
	requireDelivered(t, publishOnceReachable(t, d, numbered(topic, 1, "b")))
	b.deliveries(t, topic, 2)
}

// publishOnceReachable publishes msgs again while they fail as unreachable, for ten
// seconds at most, as the dispatcher retries a message that never left without spending
// an attempt: after a test broke the driver's connection or channel, a reopening within
// a 300 ms publish_timeout may not make it on a loaded machine.
func publishOnceReachable(t *testing.T, d *Driver, msgs []router.Message) []error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		errs := d.Publish(testCtx(t), msgs)
		if slices.IndexFunc(errs, func(err error) bool { return err != nil && router.KindOf(err) == router.KindUnreachable }) < 0 ||
			time.Now().After(deadline) {
			return errs
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestConcurrentPublishesAreEachDeliveredOnce(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	d := newDriver(t, testOptions(brokerURL(), b.exchange))
	topic := b.topic(t)
	const workers, batches, size = 6, 10, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := range batches {
				for i, err := range d.Publish(testCtx(t), numbered(topic, size, "w"+strconv.Itoa(w)+"b"+strconv.Itoa(n))) {
					if err != nil {
						t.Errorf("worker %d batch %d message %d: %v", w, n, i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, got := range b.deliveries(t, topic, workers*batches*size) {
		if seen[string(got.Body)] {
			t.Fatalf("%s arrived twice", got.Body)
		}
		seen[string(got.Body)] = true
	}
}

func TestCredentialsFromTheOptionsReplaceTheURLs(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	topic := b.topic(t)
	u, err := amqp.ParseURI(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	user, pass := u.Username, u.Password
	u.Username, u.Password = "nobody", "wrong-url-password"
	o := testOptions(u.String(), b.exchange)
	o.Username, o.Password = user, secret(pass)
	requireDelivered(t, newDriver(t, o).Publish(testCtx(t), numbered(topic, 1, "a")))

	o = testOptions(brokerURL(), b.exchange)
	o.Username, o.Password = user, "wrong-option-password"
	errs := newDriver(t, o).Publish(testCtx(t), numbered(topic, 1, "b"))
	if router.KindOf(errs[0]) != router.KindUnreachable || strings.Contains(errs[0].Error(), "wrong-option-password") {
		t.Fatalf("a refused login: %v (%s); want unreachable, the password not shown", errs[0], router.KindOf(errs[0]))
	}
	b.deliveries(t, topic, 1)
}

func TestAVhostTheUserMayNotUseIsUnreachable(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	o := testOptions(brokerURL(), b.exchange)
	o.Vhost = "outboxd-test-no-such-vhost"
	errs := newDriver(t, o).Publish(testCtx(t), numbered("x", 2, "a"))
	for i, err := range errs {
		if router.KindOf(err) != router.KindUnreachable || strings.Contains(err.Error(), ":guest@") {
			t.Fatalf("message %d: %v (%s); want unreachable, credentials redacted", i, err, router.KindOf(err))
		}
	}
}

func TestAFailedConnectionNamesTheBrokerWithoutItsPassword(t *testing.T) {
	t.Parallel()
	url := strings.Replace(refusingURL(t), "guest:guest@", "outboxd:s3cret-pw@", 1)
	errs := newDriver(t, testOptions(url, "x")).Publish(testCtx(t), numbered("x", 1, "a"))
	got := errs[0].Error()
	if router.KindOf(errs[0]) != router.KindUnreachable || strings.Contains(got, "s3cret-pw") ||
		!strings.Contains(got, "outboxd:[REDACTED]@127.0.0.1:") || !strings.Contains(got, "connection refused") {
		t.Fatalf("error %q (%s); want unreachable, naming the address and not the password", got, router.KindOf(errs[0]))
	}
}

func secret(s string) driveropt.Secret { return driveropt.Secret(s) }

func TestProbe(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	queue := b.bind("outboxd-test-probe-" + suffix())
	b2 := newBroker(t, "")
	defaultQueue := b2.bind("outboxd-test-probe-" + suffix())
	ctx := testCtx(t)
	var missing *router.NoDestinationError
	cases := []struct {
		name     string
		url      string
		exchange string
		dest     string
		want     string // "" nil, "missing", "error"
	}{
		{"an existing exchange answers", brokerURL(), b.exchange, "", ""},
		{"an existing exchange answers for any routing key", brokerURL(), b.exchange, "any.key", ""},
		{"a missing exchange is a missing destination", brokerURL(), "outboxd-test-missing-" + suffix(), "", "missing"},
		{"the default exchange needs no declaration", brokerURL(), "", "", ""},
		{"on the default exchange, a queue of the name answers", brokerURL(), "", defaultQueue, ""},
		{"on the default exchange, no queue of the name is a missing destination", brokerURL(), "", "outboxd-test-missing-" + suffix(), "missing"},
		{"an absent broker is an error", refusingURL(t), b.exchange, "", "error"},
	}
	_ = queue
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDriver(t, testOptions(c.url, c.exchange))
			err := d.Probe(ctx, c.dest)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Probe: %v", err)
			case c.want == "missing" && !errors.As(err, &missing):
				t.Fatalf("Probe: %v, want a missing destination", err)
			case c.want == "error" && (err == nil || errors.As(err, &missing)):
				t.Fatalf("Probe: %v, want an error", err)
			}
			// The probe's closed channel leaves the driver working.
			if c.want == "missing" && c.exchange == b.exchange {
				requireDelivered(t, d.Publish(ctx, numbered(queue, 1, "a")))
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

func TestCloseWaitsForAPublishInFlight(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "topic")
	p := newProxy(t, brokerAddr(t))
	d := newDriver(t, testOptions(p.url(), b.exchange))
	topic := b.topic(t)
	p.holdReplies() // the publish stays in its AMQP handshake
	done := make(chan []error)
	go func() { done <- d.Publish(context.Background(), numbered(topic, 2, "a")) }()
	<-p.sent
	closed := make(chan error)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a publish was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.release()
	requireDelivered(t, <-done)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	b.deliveries(t, topic, 2)
}
