package kafka

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/router"
)

// Concurrent publishes to partitions led by two brokers, while the brokers refuse some
// requests with a temporary code (and all of them for 400 ms) and drop the connection on
// others, before storing anything. Each caller publishes again what came back failed, as the dispatcher does.
// Every message must end up at the broker exactly once: none reported published that the
// broker does not hold, none lost, none written twice.
func TestConcurrentPublishesUnderRefusalsAndDroppedConnectionsLoseNothing(t *testing.T) {
	t.Parallel()
	const (
		partitions = 4
		publishers = 4
		batches    = 20
		perBatch   = 60
	)
	cluster := newCluster(t, 2, "events", partitions, map[int32]int32{0: 0, 1: 1, 2: 0, 3: 1})
	d := newDriver(t, testConfig(cluster.ListenAddrs()...))

	var requests, refused, dropped atomic.Int64
	var outageEnds atomic.Int64 // unix ns: every request is refused until then
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		n := requests.Add(1)
		if n == 60 { // an outage longer than the driver's own attempts: failures reach the callers
			outageEnds.Store(time.Now().Add(400 * time.Millisecond).UnixNano())
		}
		switch {
		case n%5 == 1 || time.Now().UnixNano() < outageEnds.Load(): // refused: NOT_ENOUGH_REPLICAS on every partition
			refused.Add(1)
			return refusal(req.(*kmsg.ProduceRequest), kerr.NotEnoughReplicas.Code), nil, true
		case n%7 == 3: // the connection dropped, the request unread
			dropped.Add(1)
			return nil, kerr.UnknownServerError, true
		}
		return nil, nil, false
	})

	ctx := testCtx(t)
	var failures atomic.Int64
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for b := range batches {
				msgs := make([]router.Message, perBatch)
				for i := range msgs {
					id := int64(g*1_000_000 + b*1_000 + i)
					msgs[i] = router.Message{ID: id, Stream: "orders", Topic: "events",
						Key: []byte("key-" + strconv.Itoa(i%20)), Payload: []byte(strconv.FormatInt(id, 10))}
				}
				for attempt := 1; len(msgs) > 0; attempt++ {
					if attempt > 20 {
						t.Errorf("publisher %d batch %d: %d messages still failing after 20 publishes", g, b, len(msgs))
						return
					}
					var again []router.Message
					for i, err := range d.Publish(ctx, msgs) {
						if err != nil {
							if k := router.KindOf(err); k != router.KindRetryable && k != router.KindUnreachable {
								t.Errorf("message %d: %v (%s), want a failure worth retrying", msgs[i].ID, err, k)
								return
							}
							failures.Add(1)
							again = append(again, msgs[i])
						}
					}
					msgs = again
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	const total = publishers * batches * perBatch
	t.Logf("%d produce requests, %d refused, %d connections dropped; %d message failures reported and published again",
		requests.Load(), refused.Load(), dropped.Load(), failures.Load())
	if refused.Load() == 0 || dropped.Load() == 0 || failures.Load() == 0 {
		t.Fatalf("the faults were not felt: %d refused, %d dropped, %d failures", refused.Load(), dropped.Load(), failures.Load())
	}

	// Every publish has returned, each message confirmed by every in-sync replica: what
	// the topic holds now is all it will hold.
	seen, held := map[string]int{}, 0
	for _, msgs := range readTopicNow(t, cluster.ListenAddrs()[0], "events") {
		held += len(msgs)
		for _, m := range msgs {
			seen[header(m, router.HeaderID)]++
		}
	}
	if held != total {
		t.Errorf("the topic holds %d messages, want %d", held, total)
	}
	var wrong []string
	for g := range publishers {
		for b := range batches {
			for i := range perBatch {
				id := strconv.Itoa(g*1_000_000 + b*1_000 + i)
				if n := seen[id]; n != 1 {
					wrong = append(wrong, id+" ×"+strconv.Itoa(n))
				}
			}
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("%d messages are not at the broker exactly once (id ×times held): %v", len(wrong), wrong[:min(len(wrong), 10)])
	}
}

// A partition whose leadership moves to another broker (a rolling restart) is refused by
// its old leader as NOT_LEADER_FOR_PARTITION until the producer's metadata, refreshed
// every metadataTTL, names the new one: those messages fail retryable, the rest of the
// publish is delivered, and publishing again reaches the new leader.
func TestAPartitionWhoseLeaderMovesIsPublishedToOnceTheMetadataNamesTheNewLeader(t *testing.T) {
	t.Parallel()
	const partitions = 2
	cluster := newCluster(t, 2, "events", partitions, map[int32]int32{0: 0, 1: 0})
	d := newDriver(t, testConfig(cluster.ListenAddrs()...))
	ctx := testCtx(t)
	msgs := numbered("events", 40, "a", "b", "c", "d", "e", "f")
	for i, err := range d.Publish(ctx, msgs[:20]) {
		if err != nil {
			t.Fatalf("message %d before the move: %v", i, err)
		}
	}
	if err := cluster.MoveTopicPartition("events", 0, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pending, refusedAfterMove := msgs[20:], 0
	for publishes := 1; len(pending) > 0; publishes++ {
		if time.Since(start) > 3*metadataTTL {
			t.Fatalf("%d messages still refused %v after the move (metadata TTL %v)", len(pending), time.Since(start).Round(time.Millisecond), metadataTTL)
		}
		var again []router.Message
		for i, err := range d.Publish(ctx, pending) {
			switch {
			case err == nil:
			case router.KindOf(err) == router.KindRetryable && errors.Is(err, kafka.NotLeaderForPartition):
				refusedAfterMove++
				again = append(again, pending[i])
			default:
				t.Fatalf("message %d after the move: %v (%s), want retryable NOT_LEADER_FOR_PARTITION or success", pending[i].ID, err, router.KindOf(err))
			}
		}
		pending = again
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("after the move: %d refusals by the old leader, all delivered %v later", refusedAfterMove, time.Since(start).Round(time.Millisecond))
	seen := map[string]int{}
	for _, ms := range readTopic(t, cluster.ListenAddrs()[0], "events", len(msgs)) {
		for _, m := range ms {
			seen[header(m, router.HeaderID)]++
		}
	}
	for _, m := range msgs {
		if n := seen[strconv.FormatInt(m.ID, 10)]; n != 1 {
			t.Fatalf("message %d is at the broker %d times, want once", m.ID, n)
		}
	}
}
