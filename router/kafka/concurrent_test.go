package kafka

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/router"
)

// Concurrent publishes to partitions led by two brokers, while the brokers refuse some
// requests with a temporary code and drop the connection on others, before storing
// anything. Each caller publishes again what came back failed, as the dispatcher does.
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
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		switch n := requests.Add(1); {
		case n%5 == 1: // refused: NOT_ENOUGH_REPLICAS on every partition of the request
			refused.Add(1)
			pr := req.(*kmsg.ProduceRequest)
			resp := pr.ResponseKind().(*kmsg.ProduceResponse)
			for _, rt := range pr.Topics {
				st := kmsg.NewProduceResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewProduceResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotEnoughReplicas.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
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
