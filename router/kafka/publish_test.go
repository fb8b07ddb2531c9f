package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

func TestEveryKeyLandsOnOnePartitionInOrder(t *testing.T) {
	t.Parallel()
	const partitions, keys, perCall, calls = 6, 30, 100, 3
	k := testenv.NewKafka(t, partitions, "orders")
	d := newDriver(t, testConfig(k.Addr()))

	names := make([]string, keys)
	for i := range names {
		names[i] = "customer-" + strconv.Itoa(i)
	}
	all := numbered("orders", perCall*calls, names...)
	for c := range calls { // the same keys across calls must keep their partition
		for i, err := range d.Publish(testCtx(t), all[c*perCall:(c+1)*perCall]) {
			if err != nil {
				t.Fatalf("message %d: %v", c*perCall+i, err)
			}
		}
	}

	partitionOfKey := map[string]int{}
	lastSeq := map[string]int{}
	for p, msgs := range readTopic(t, k.Addr(), "orders", perCall*calls) {
		for _, m := range msgs {
			key := string(m.Key)
			if q, seen := partitionOfKey[key]; seen && q != p {
				t.Fatalf("key %s landed on partitions %d and %d", key, q, p)
			}
			partitionOfKey[key] = p
			if want := partitionOf(key, partitions); p != want {
				t.Fatalf("key %s landed on partition %d; murmur2 says %d", key, p, want)
			}
			seq, _ := strconv.Atoi(header(m, "seq"))
			if last, seen := lastSeq[key]; seen && seq <= last {
				t.Fatalf("key %s: message %d arrived after message %d", key, seq, last)
			}
			lastSeq[key] = seq
		}
	}
	used := map[int]bool{}
	for _, p := range partitionOfKey {
		used[p] = true
	}
	if len(partitionOfKey) != keys || len(used) < 2 {
		t.Fatalf("%d keys over %d partitions; want %d keys spread out", len(partitionOfKey), len(used), keys)
	}
}

// refuseProduce makes the broker answer every produce request for which refuse returns
// a non-zero code with that code, on every partition of the request, and counts them.
func refuseProduce(c *kfake.Cluster, refuse func(topic string, partition int32, records []byte) int16) *atomic.Int32 {
	var hits atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		var code int16
		for _, rt := range pr.Topics {
			for _, rp := range rt.Partitions {
				code = max(code, refuse(rt.Topic, rp.Partition, rp.Records))
			}
		}
		if code == 0 {
			return nil, nil, false // the broker handles it
		}
		c.KeepControl()
		hits.Add(1)
		return refusal(pr, code), nil, true
	})
	return &hits
}

// refusal is a broker's answer to pr that refuses every partition of it with code.
func refusal(pr *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := pr.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range pr.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

func TestABrokerRefusalIsRetryableForTheMessagesOfThatPartitionOnly(t *testing.T) {
	t.Parallel()
	const partitions = 3
	refused := int32(partitionOf("key-0", partitions))
	// The refusing partition has a broker of its own, so that its requests hold only
	// its messages; a broker answers each partition of a request on its own.
	cluster := newCluster(t, 2, "events", partitions, map[int32]int32{0: 0, 1: 0, 2: 0, refused: 1})
	d := newDriver(t, testConfig(cluster.ListenAddrs()...))
	hits := refuseProduce(cluster, func(topic string, p int32, _ []byte) int16 {
		if p == refused {
			return kerr.NotEnoughReplicas.Code
		}
		return 0
	})

	msgs := numbered("events", 30, "key-0", "key-1", "key-2", "key-3", "key-4", "key-5")
	errs := d.Publish(testCtx(t), msgs)
	delivered := 0
	for i, err := range errs {
		onRefused := partitionOf(string(msgs[i].Key), partitions) == int(refused)
		switch {
		case onRefused && (router.KindOf(err) != router.KindRetryable || !errors.Is(err, kafka.NotEnoughReplicas)):
			t.Fatalf("message %d on the refusing partition: %v (%s), want retryable NOT_ENOUGH_REPLICAS", i, err, router.KindOf(err))
		case !onRefused && err != nil:
			t.Fatalf("message %d on a healthy partition: %v", i, err)
		case !onRefused:
			delivered++
		}
	}
	if n := hits.Load(); n != writeAttempts {
		t.Fatalf("the refusing partition saw %d produce requests, want %d (the driver's attempts)", n, writeAttempts)
	}
	if delivered == 0 || delivered == len(msgs) {
		t.Fatalf("%d of %d messages avoided the refusing partition; the test needs some of each", delivered, len(msgs))
	}
	readTopic(t, cluster.ListenAddrs()[0], "events", delivered)
}

func TestABatchRefusedAsTooLargeIsResentSoOnlyTheCulpritFails(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "events")
	d := newDriver(t, testConfig(k.Addr()))
	marker := []byte("this one is too large")
	hits := refuseProduce(k.Cluster(), func(_ string, _ int32, records []byte) int16 {
		if bytes.Contains(records, marker) {
			return kerr.MessageTooLarge.Code
		}
		return 0
	})

	const bad = 7
	msgs := numbered("events", 20, "same-key") // one partition, one request
	msgs[bad].Payload = marker
	errs := d.Publish(testCtx(t), msgs)
	for i, err := range errs {
		if i == bad {
			if router.KindOf(err) != router.KindPermanent || !errors.Is(err, kafka.MessageSizeTooLarge) {
				t.Fatalf("the culprit: %v (%s), want permanent MESSAGE_TOO_LARGE", err, router.KindOf(err))
			}
		} else if err != nil {
			t.Fatalf("message %d, refused only for sharing a request with the culprit: %v", i, err)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("the broker refused %d requests, want 2 (the batch, then the culprit alone)", n)
	}
	assertDeliveredInOrder(t, k.Addr(), "events", len(msgs)-1, bad)
}

func TestATopicWithASmallerMessageLimitFailsOnlyTheMessageAboveIt(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1)
	createTopic(t, k.Addr(), "small", 1, kafka.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: "8192"})
	d := newDriver(t, testConfig(k.Addr()))

	const bad = 4
	msgs := numbered("small", 12, "k")
	for i := range msgs {
		msgs[i].Payload = bytes.Repeat([]byte{'x'}, 500)
	}
	msgs[bad].Payload = bytes.Repeat([]byte{'y'}, 20_000) // under our limit, over the topic's
	errs := d.Publish(testCtx(t), msgs)
	for i, err := range errs {
		if i == bad {
			if router.KindOf(err) != router.KindPermanent || !errors.Is(err, kafka.MessageSizeTooLarge) {
				t.Fatalf("the oversize message: %v (%s), want permanent MESSAGE_TOO_LARGE from the broker", err, router.KindOf(err))
			}
		} else if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	assertDeliveredInOrder(t, k.Addr(), "small", len(msgs)-1, bad)
}

func TestAMessageAboveTheRequestLimitFailsAloneWithoutBeingSent(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "big")
	d := newDriver(t, testConfig(k.Addr()))

	const over, atLimit = 2, 3
	msgs := numbered("big", 6, "a", "b", "c")
	sized := func(i, size int) {
		msgs[i].Payload = nil
		base := requestSize(ptr(message(&msgs[i], nil, nil)))
		msgs[i].Payload = bytes.Repeat([]byte{'z'}, size-base)
	}
	sized(over, maxRequestBytes+1)
	sized(atLimit, maxRequestBytes)

	errs := d.Publish(testCtx(t), msgs)
	for i, err := range errs {
		if i == over {
			if router.KindOf(err) != router.KindPermanent || !errors.Is(err, kafka.MessageSizeTooLarge) ||
				!strings.Contains(err.Error(), strconv.Itoa(maxRequestBytes+1)) {
				t.Fatalf("the message above the limit: %v (%s), want permanent and its size", err, router.KindOf(err))
			}
		} else if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := readTopic(t, k.Addr(), "big", len(msgs)-1)
	for _, ms := range got {
		for _, m := range ms {
			if header(m, "seq") == strconv.Itoa(over) {
				t.Fatal("the message above the limit was sent")
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// assertDeliveredInOrder checks that topic's single partition holds want messages in
// seq order, none of them seq skip.
func assertDeliveredInOrder(t *testing.T, addr, topic string, want, skip int) {
	t.Helper()
	last := -1
	for _, ms := range readTopic(t, addr, topic, want) {
		for _, m := range ms {
			seq, _ := strconv.Atoi(header(m, "seq"))
			if seq == skip || seq <= last {
				t.Fatalf("message %d arrived after %d (refused: %d)", seq, last, skip)
			}
			last = seq
		}
	}
}

func TestAMissingTopicIsPermanentAndNamedWhileTheRestIsDelivered(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "events")
	d := newDriver(t, testConfig(k.Addr()))
	msgs := numbered("events", 4, "a")
	msgs[1].Topic = "no.such.topic"
	errs := d.Publish(testCtx(t), msgs)
	err := errs[1]
	if router.KindOf(err) != router.KindPermanent || !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("publish to a missing topic: %v (%s), want permanent", err, router.KindOf(err))
	}
	for _, part := range []string{`"no.such.topic"`, "does not exist", "auto-creation is off"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("the error %q does not say %s", err, part)
		}
	}
	for i, err := range errs {
		if i != 1 && err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	readTopic(t, k.Addr(), "events", 3)
}

func TestATopicCreatedAfterTheDriverStartedIsPublishedTo(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "first")
	d := newDriver(t, testConfig(k.Addr()))
	for _, err := range d.Publish(testCtx(t), numbered("first", 1, "a")) { // fills the metadata cache
		if err != nil {
			t.Fatal(err)
		}
	}
	createTopic(t, k.Addr(), "second", 3)
	start := time.Now()
	for i, err := range d.Publish(testCtx(t), numbered("second", 3, "a")) {
		if err != nil {
			t.Fatalf("message %d to a topic created after the cache was filled: %v", i, err)
		}
	}
	t.Logf("the first publish to the new topic took %v (metadata TTL %v)", time.Since(start).Round(time.Millisecond), metadataTTL)
	readTopic(t, k.Addr(), "second", 3)
}

func TestAutoCreationCreatesAMissingTopicWhenAllowed(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cfg := testConfig(addr)
	cfg.AllowAutoTopicCreation = true
	d := newDriver(t, cfg)
	for i, err := range d.Publish(testCtx(t), numbered("created.on.demand", 5, "a", "b")) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	readTopic(t, addr, "created.on.demand", 5)
}

func TestAStoppedBrokerIsUnreachableAndTheSameDriverPublishesOnceItIsBack(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "events")
	cfg := testConfig(k.Addr())
	d := newDriver(t, cfg)
	for _, err := range d.Publish(testCtx(t), numbered("events", 5, "a", "b")) { // connections and metadata in place
		if err != nil {
			t.Fatal(err)
		}
	}

	k.Stop()
	start := time.Now()
	errs := d.Publish(testCtx(t), numbered("events", 10, "a", "b", "c"))
	elapsed := time.Since(start)
	for i, err := range errs {
		if router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d to a stopped broker: %v (%s), want unreachable", i, err, router.KindOf(err))
		}
	}
	t.Logf("stopped broker: %d messages unreachable after %v (write timeout %v); first error: %v",
		len(errs), elapsed.Round(time.Millisecond), cfg.WriteTimeout, errs[0])
	if elapsed > cfg.WriteTimeout/4 {
		t.Fatalf("reporting a stopped broker took %v, want well under the write timeout %v", elapsed, cfg.WriteTimeout)
	}

	k.Start()
	recovered, attempts := publishUntilDelivered(t, d, numbered("events", 10, "a", "b", "c"))
	t.Logf("restarted broker: the same driver published again after %v and %d attempts", recovered.Round(time.Millisecond), attempts)
	readTopic(t, k.Addr(), "events", 10) // the restarted broker starts empty
}

func TestADriverCreatedWhileTheBrokerIsDownStartsAndLaterPublishes(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "events")
	k.Stop()
	start := time.Now()
	d, err := New("down", testConfig(k.Addr()), quiet)
	if err != nil {
		t.Fatalf("New with the broker down: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	t.Logf("New returned after %v", time.Since(start))
	for i, err := range d.Publish(testCtx(t), numbered("events", 3, "a")) {
		if router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d: %v (%s), want unreachable", i, err, router.KindOf(err))
		}
	}

	k.Start()
	recovered, attempts := publishUntilDelivered(t, d, numbered("events", 3, "a"))
	t.Logf("broker started: the driver published after %v and %d attempts (metadata TTL %v)", recovered.Round(time.Millisecond), attempts, metadataTTL)
	readTopic(t, k.Addr(), "events", 3)
}

// publishUntilDelivered publishes msgs until every one is confirmed, as the dispatcher
// would while a broker comes back; until then every failure must be unreachable.
func publishUntilDelivered(t *testing.T, d *Driver, msgs []router.Message) (time.Duration, int) {
	t.Helper()
	ctx := testCtx(t)
	start := time.Now()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for attempt := 1; ; attempt++ {
		errs := d.Publish(ctx, msgs)
		failed := 0
		for i, err := range errs {
			if err != nil && router.KindOf(err) != router.KindUnreachable {
				t.Fatalf("attempt %d, message %d: %v (%s), want unreachable while the broker returns", attempt, i, err, router.KindOf(err))
			}
			if err != nil {
				failed++
			}
		}
		if failed == 0 {
			return time.Since(start), attempt
		}
		if failed != len(msgs) {
			t.Fatalf("attempt %d confirmed some messages and not others", attempt)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker is back but publishing still fails: %v", errs[0])
		case <-tick.C:
		}
	}
}

// A publish with more for one partition than one request carries sends it in requests
// one after the other; the second is held at the broker until the call is cancelled.
// What the first confirmed stays published; the rest is cancelled, not failed.
func TestCancellingMidWriteKeepsWhatWasConfirmedAndCancelsTheRest(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 2, "events")
	d := newDriver(t, testConfig(k.Addr()))

	held, release := make(chan struct{}), make(chan struct{})
	defer close(release) // before the driver's Close, which waits for the held request
	var requests atomic.Int32
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if requests.Add(1) == 2 {
			close(held)
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	ctx, cancel := context.WithCancel(context.Background())
	msgs := numbered("events", batchMessages+batchMessages/2, "one-key")
	result := make(chan []error, 1)
	go func() { result <- d.Publish(ctx, msgs) }()
	<-held
	cancel()
	cancelled := time.Now()
	errs := <-result
	t.Logf("Publish returned %v after its context was cancelled", time.Since(cancelled).Round(time.Microsecond))
	for i, err := range errs {
		if i < batchMessages && err != nil {
			t.Fatalf("message %d, confirmed by the first request: %v", i, err)
		}
		if i >= batchMessages && (router.KindOf(err) != router.KindCanceled || !errors.Is(err, context.Canceled)) {
			t.Fatalf("message %d, in the held request: %v (%s), want canceled", i, err, router.KindOf(err))
		}
	}
}

func TestTheOutboxHeadersFollowTheProducersInNameOrderAndCannotBeSpoofed(t *testing.T) {
	t.Parallel()
	m := router.Message{ID: 42, Stream: "orders", Topic: "t", RowDedupID: "6f1c2a56-7f3e-4b8e-9a55-0d3c1b2a4e10",
		Headers: map[string]string{
			"b": "2", "a": "1", router.HeaderID: "spoofed", router.HeaderStream: "spoofed", router.HeaderMessageID: "spoofed",
		}}
	got := message(&m, nil, nil).Headers
	want := []kafka.Header{
		{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")},
		{Key: router.HeaderID, Value: []byte("42")}, {Key: router.HeaderStream, Value: []byte("orders")},
		{Key: router.HeaderMessageID, Value: []byte(m.RowDedupID)},
	}
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Key != want[i].Key || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("header %d is %s=%s, want %s=%s", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

func TestMessagesSharingACallsSlabEachKeepTheirOwnHeaders(t *testing.T) {
	t.Parallel()
	// The slab is sized by the first message; the later ones outgrow it, in headers
	// and in bytes, so some of their storage comes from replacements.
	msgs := []router.Message{{ID: 1, Stream: "orders", Headers: map[string]string{"a": "1"}}}
	for i := int64(2); i <= 40; i++ {
		h := map[string]string{"a": strings.Repeat("v", int(i))}
		for j := range i % 5 {
			h[fmt.Sprintf("extra-%d", j)] = fmt.Sprint(i * 1000)
		}
		m := router.Message{ID: i * 1_000_000_007, Stream: "orders", Headers: h}
		if i%3 == 0 {
			m.RowDedupID = fmt.Sprintf("dedup-%d", i)
		}
		msgs = append(msgs, m)
	}
	s := newSlab(len(msgs), &msgs[0])
	built := make([]kafka.Message, len(msgs))
	for i := range msgs {
		built[i] = message(&msgs[i], []byte("orders"), s)
	}
	for i := range msgs {
		want := message(&msgs[i], nil, nil).Headers
		got := built[i].Headers
		if len(got) != len(want) {
			t.Fatalf("message %d: headers %v, want %v", i, got, want)
		}
		for j := range want {
			if got[j].Key != want[j].Key || !bytes.Equal(got[j].Value, want[j].Value) {
				t.Fatalf("message %d, header %d: %s=%q, want %s=%q", i, j, got[j].Key, got[j].Value, want[j].Key, want[j].Value)
			}
		}
	}
}

func TestEachMessageCarriesItsOwnStreamAndMessageIDWhateverItsCallShares(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		m          router.Message
		shared     []byte // the stream bytes the call holds from an earlier message
		stream, id string
	}{
		{"a message of the stream the call holds shares its bytes",
			router.Message{ID: 7, Stream: "orders"}, []byte("orders"), "orders", "7"},
		{"a message of another stream than the call holds carries its own",
			router.Message{ID: 7, Stream: "payments"}, []byte("orders"), "payments", "7"},
		{"a message with a producer's message id carries that id",
			router.Message{ID: 7, Stream: "orders", MessageID: "order-7"}, []byte("orders"), "orders", "order-7"},
		{"a message with a row's de-duplication id carries that id",
			router.Message{ID: 7, Stream: "orders", RowDedupID: "6f1c2a56"}, nil, "orders", "6f1c2a56"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{}
			for _, h := range message(&tc.m, tc.shared, nil).Headers {
				got[h.Key] = string(h.Value)
			}
			if got[router.HeaderStream] != tc.stream || got[router.HeaderMessageID] != tc.id || got[router.HeaderID] != "7" {
				t.Fatalf("headers %v; want stream %q, message id %q, outbox id 7", got, tc.stream, tc.id)
			}
		})
	}
}

func TestAMessageWithoutATopicFailsAlone(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "events")
	d := newDriver(t, testConfig(k.Addr()))
	msgs := numbered("events", 3, "a")
	msgs[0].Topic = ""
	errs := d.Publish(testCtx(t), msgs)
	if router.KindOf(errs[0]) != router.KindPermanent || errs[1] != nil || errs[2] != nil {
		t.Fatalf("results %v (%v)", kinds(errs), errs)
	}
}

func TestOnePublishIsOneProduceRequestPerLeadingBroker(t *testing.T) {
	t.Parallel()
	spread := make([]string, 40)
	for i := range spread {
		spread[i] = "key-" + strconv.Itoa(i)
	}
	cases := []struct {
		name     string
		brokers  int
		messages int
		keys     []string
		requests int // per leading broker and publish
	}{
		{"a default claim on one key is one request", 1, 100, []string{"hot"}, 1},
		{"a claim of 600 on one key is one request", 1, 600, []string{"hot"}, 1},
		{"a claim of 200 over 40 keys is one request for every partition", 1, 200, spread, 1},
		{"a claim over 40 keys on two brokers is one request to each, for the partitions it leads", 2, 200, spread, 1},
		{"more messages for a partition than a request carries go in two requests", 1, batchMessages + 1, []string{"hot"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const partitions = 4
			leaders := map[int32]int32{} // on two brokers, each leads two partitions
			for p := range int32(partitions) {
				leaders[p] = p % int32(tc.brokers)
			}
			cluster := newCluster(t, tc.brokers, "events", partitions, leaders)
			d := newDriver(t, testConfig(cluster.ListenAddrs()...))
			type request struct {
				broker     int32
				partitions []int32
			}
			var mu sync.Mutex
			var got []request
			cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				r := request{broker: cluster.CurrentNode()}
				for _, rt := range req.(*kmsg.ProduceRequest).Topics {
					for _, rp := range rt.Partitions {
						r.partitions = append(r.partitions, rp.Partition)
					}
				}
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
				return nil, nil, false // only counting
			})
			const calls = 3
			for range calls {
				for i, err := range d.Publish(testCtx(t), numbered("events", tc.messages, tc.keys...)) {
					if err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			perBroker := map[int32]int{}
			leaderOf := map[int32]int32{}
			seen := map[int32]bool{}
			for _, r := range got {
				perBroker[r.broker]++
				for _, p := range r.partitions {
					seen[p] = true
					if b, ok := leaderOf[p]; ok && b != r.broker {
						t.Fatalf("partition %d was sent to brokers %d and %d", p, b, r.broker)
					}
					leaderOf[p] = r.broker
				}
			}
			if len(tc.keys) > 1 && len(seen) != partitions {
				t.Fatalf("partitions written %v; want all %d (requests %v)", seen, partitions, got)
			}
			if len(perBroker) != tc.brokers && len(tc.keys) > 1 {
				t.Fatalf("requests went to %d brokers, want %d (requests %v)", len(perBroker), tc.brokers, got)
			}
			for b, n := range perBroker {
				if n != calls*tc.requests {
					t.Fatalf("broker %d got %d produce requests for %d publishes, want %d each (all: %v)", b, n, calls, tc.requests, got)
				}
			}
		})
	}
}

func TestABrokerThatNeverAnswersIsUnreachableBeforeTheWriteTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan []net.Conn, 1)
	go func() { // accept, then say nothing until the test ends
		var conns []net.Conn
		defer func() { accepted <- conns }()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, conn)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for _, c := range <-accepted {
			_ = c.Close()
		}
	})
	cfg := testConfig(ln.Addr().String())
	cfg.WriteTimeout = 2 * time.Second
	d := newDriver(t, cfg)
	start := time.Now()
	errs := d.Publish(testCtx(t), numbered("events", 3, "a"))
	elapsed := time.Since(start)
	for i, err := range errs {
		if router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d: %v (%s), want unreachable", i, err, router.KindOf(err))
		}
	}
	t.Logf("a silent broker was reported unreachable after %v (write timeout %v): %v", elapsed.Round(time.Millisecond), cfg.WriteTimeout, errs[0])
	if elapsed >= cfg.WriteTimeout {
		t.Fatalf("it took the whole write timeout")
	}
}

func TestPublishingAfterCloseSendsNothingAndSaysTheDriverIsClosed(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "events")
	d := newDriver(t, testConfig(k.Addr()))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for i, err := range d.Publish(testCtx(t), numbered("events", 3, "a")) {
		if !errors.Is(err, router.ErrClosed) || router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d after close: %v (%s), want unreachable wrapping ErrClosed", i, err, router.KindOf(err))
		}
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// In an ordered publish the same refusal must not let the culprit's successors of its
// key overtake it: they are held back unsent, while messages before it and of other
// keys are delivered.
func TestInAnOrderedPublishAMessageRefusedAsTooLargeHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1)
	createTopic(t, k.Addr(), "small", 1, kafka.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: "8192"})
	d := newDriver(t, testConfig(k.Addr()))
	rt, err := router.New([]router.Route{{Stream: "s", DriverName: "k", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("s")
	if err != nil {
		t.Fatal(err)
	}
	const bad = 4
	msgs := numbered("small", 12, "k")
	msgs[10].Key, msgs[11].Key = []byte("other"), []byte("other")
	msgs[bad].Payload = bytes.Repeat([]byte{'y'}, 20_000) // under our limit, over the topic's
	errs := pub.PublishOrdered(testCtx(t), msgs)
	for i, err := range errs {
		switch {
		case i == bad:
			if router.KindOf(err) != router.KindPermanent {
				t.Fatalf("the oversize message: %v, want permanent", err)
			}
		case i > bad && i < 10:
			if router.KindOf(err) != router.KindHeldBack {
				t.Fatalf("message %d behind the refused one of its key: %v, want held back", i, err)
			}
		case err != nil:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if got := readTopic(t, k.Addr(), "small", bad+2); len(got[0]) != bad+2 {
		t.Fatalf("%d messages at the broker, want %d (before the culprit, and the other key)", len(got[0]), bad+2)
	}
}
