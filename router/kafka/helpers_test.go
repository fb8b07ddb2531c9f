package kafka

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/router"
)

// kafka-go's goroutines may outlive a test (a write abandoned at its deadline), so
// test drivers log nowhere rather than to t.
var quiet = slog.New(slog.DiscardHandler)

func testConfig(brokers ...string) Options {
	cfg := DefaultOptions()
	cfg.Brokers = brokers
	return cfg
}

// newDriver builds a driver for t and closes it when t ends.
func newDriver(t testing.TB, cfg Options) *Driver {
	t.Helper()
	d, err := New("test", cfg, quiet)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var topicSeq atomic.Int64

// uniqueTopic names a topic no other test uses.
func uniqueTopic(prefix string) string {
	return prefix + "-" + strconv.FormatInt(topicSeq.Add(1), 10)
}

// createTopic creates topic on the broker at addr, as an administrator would, behind
// the back of any driver already running.
func createTopic(t testing.TB, addr, topic string, partitions int, configs ...kafka.ConfigEntry) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(addr), Transport: tr, Timeout: 10 * time.Second}
	res, err := client.CreateTopics(testCtx(t), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: configs,
	}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// readTopic returns every message on topic, partition by partition, once there are
// want of them; it fails t if a deadline passes first or if there are more.
func readTopic(t testing.TB, addr, topic string, want int) map[int][]kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var end []int64
	for {
		end = topicEnds(ctx, t, addr, topic)
		total := 0
		for _, e := range end {
			total += int(e)
		}
		if total > want {
			t.Fatalf("topic %s holds %d messages, want %d", topic, total, want)
		}
		if total == want {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s holds %d messages after waiting, want %d", topic, total, want)
		case <-tick.C:
		}
	}
	return readTo(ctx, t, addr, topic, end)
}

// readTopicNow returns every message on topic now, partition by partition.
func readTopicNow(t testing.TB, addr, topic string) map[int][]kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return readTo(ctx, t, addr, topic, topicEnds(ctx, t, addr, topic))
}

// topicEnds returns the end offset of each of topic's partitions.
func topicEnds(ctx context.Context, t testing.TB, addr, topic string) []int64 {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("read %s: partitions: %v", topic, err)
	}
	out := make([]int64, len(parts))
	for _, p := range parts {
		leader, err := kafka.DialLeader(ctx, "tcp", addr, topic, p.ID)
		if err != nil {
			t.Fatalf("read %s/%d: %v", topic, p.ID, err)
		}
		out[p.ID], err = leader.ReadLastOffset()
		leader.Close()
		if err != nil {
			t.Fatalf("read %s/%d: last offset: %v", topic, p.ID, err)
		}
	}
	return out
}

// readTo reads each partition p of topic from its start up to end[p].
func readTo(ctx context.Context, t testing.TB, addr, topic string, end []int64) map[int][]kafka.Message {
	t.Helper()
	out := map[int][]kafka.Message{}
	for p, e := range end {
		if e == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
		for range e {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p, err)
			}
			out[p] = append(out[p], m)
		}
		r.Close()
	}
	return out
}

func header(m kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// refusingAddr is a local address whose port is bound but not listening: dialling it is
// refused at once, and no other test can take the port while t runs.
func refusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// partitionOf is where the driver's balancer sends key on a topic of n partitions.
func partitionOf(key string, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, parts...)
}

// numbered builds n messages on topic with the given keys in turn; each carries its
// index in the seq header and payload.
func numbered(topic string, n int, keys ...string) []router.Message {
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{
			ID:      int64(i + 1),
			Stream:  "orders",
			Topic:   topic,
			Key:     []byte(keys[i%len(keys)]),
			Headers: map[string]string{"seq": strconv.Itoa(i)},
			Payload: []byte("payload-" + strconv.Itoa(i)),
		}
	}
	return msgs
}

func kinds(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		if err == nil {
			out[i] = "ok"
		} else {
			out[i] = router.KindOf(err).String()
		}
	}
	return out
}

// newCluster starts, for t, a cluster of brokers (node ids 0, 1, …) holding topic with
// partitions partitions, where partition p is led by node leaders[p] when leaders has
// an entry for it; it closes when t ends.
func newCluster(t testing.TB, brokers int, topic string, partitions int32, leaders map[int32]int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p, node := range leaders {
		if err := c.MoveTopicPartition(topic, p, node); err != nil {
			t.Fatalf("lead partition %d from node %d: %v", p, node, err)
		}
	}
	return c
}
