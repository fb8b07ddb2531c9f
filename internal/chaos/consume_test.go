//go:build linux

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/router"
)

// arrival is one message as read back from a broker: what a consumer would see.
type arrival struct {
	// Dest names where it was read: "kafka orders/0" (topic/partition), "jetstream
	// SHIPMENTS", "nats payments", "dead-letter DEAD".
	Dest string
	// Seq is its position in Dest: the partition offset, the stream sequence, or the
	// order in which the subscriber received it. Arrivals of one Dest are handed to
	// checks in Seq order.
	Seq        int64
	ID         int64 // its Outbox-Id header; 0 when missing or unreadable
	Key        string
	DeadLetter bool
}

func parseID(h string) int64 {
	id, err := strconv.ParseInt(h, 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// readKafka reads every partition of the orders topic from its first offset to its
// end, straight from the broker's own listener (not through the proxy), without a
// consumer group.
func (w *world) readKafka(ctx context.Context) ([]arrival, error) {
	var out []arrival
	for p := 0; p < kafkaPartitions; p++ {
		got, err := readPartition(ctx, w.kafka.Addr(), kafkaTopic, p)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func readPartition(ctx context.Context, addr, topic string, partition int) ([]arrival, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("read kafka %s/%d: %w", topic, partition, err)
	}
	conn := kafka.NewConnWith(nc, kafka.ConnConfig{Topic: topic, Partition: partition})
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return nil, fmt.Errorf("read kafka %s/%d offsets: %w", topic, partition, err)
	}
	dest := "kafka " + topic + "/" + strconv.Itoa(partition)
	out := make([]arrival, 0, last-first)
	for off := first; off < last; {
		if _, err := conn.Seek(off, kafka.SeekAbsolute); err != nil {
			return nil, fmt.Errorf("read kafka %s: seek %d: %w", dest, off, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		batch := conn.ReadBatch(1, 16<<20)
		n := 0
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			a := arrival{Dest: dest, Seq: m.Offset, Key: string(m.Key)}
			for _, h := range m.Headers {
				if h.Key == router.HeaderID {
					a.ID = parseID(string(h.Value))
				}
			}
			out = append(out, a)
			off = m.Offset + 1
			n++
		}
		if err := batch.Close(); err != nil && n == 0 {
			return nil, fmt.Errorf("read kafka %s at offset %d of %d: %w", dest, off, last, err)
		}
	}
	return out, nil
}

// readStream reads every message a JetStream stream holds, in stream order.
func readStream(ctx context.Context, url, stream string, deadLetter bool) ([]arrival, error) {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	dest := "jetstream " + stream
	if deadLetter {
		dest = "dead-letter " + stream
	}
	out := make([]arrival, 0, info.State.Msgs)
	if info.State.Msgs == 0 {
		return out, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for uint64(len(out)) < info.State.Msgs {
		// Never more than remain: Fetch waits until it has as many as it asked for.
		batch, err := cons.Fetch(int(min(1000, info.State.Msgs-uint64(len(out)))), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, arrival{Dest: dest, Seq: int64(meta.Sequence.Stream), ID: parseID(m.Headers().Get(router.HeaderID)),
				Key: m.Headers().Get(router.HeaderKey), DeadLetter: deadLetter})
			n++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsgo.ErrTimeout) {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read stream %s: %d of %d messages, then nothing", stream, len(out), info.State.Msgs)
		}
	}
	return out, nil
}

// streamMsgs is how many messages a JetStream stream holds.
func streamMsgs(ctx context.Context, url, stream string) (uint64, error) {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// liveSubscriber records core NATS messages as they arrive: core NATS keeps nothing,
// so a consumer sees only what arrives while it is subscribed. It subscribes straight
// to the server, before any replica starts.
type liveSubscriber struct {
	mu       sync.Mutex
	arrivals []arrival
	ids      map[int64]bool
	nc       *natsgo.Conn
	errs     int
}

func subscribe(t *testing.T, url, subject string) *liveSubscriber {
	t.Helper()
	s := &liveSubscriber{ids: map[int64]bool{}}
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(-1), natsgo.ErrorHandler(func(*natsgo.Conn, *natsgo.Subscription, error) {
		s.mu.Lock()
		s.errs++ // a slow consumer would lose messages: counted, and reported
		s.mu.Unlock()
	}))
	must(t, err)
	t.Cleanup(nc.Close)
	sub, err := nc.Subscribe(subject, func(m *natsgo.Msg) {
		s.mu.Lock()
		defer s.mu.Unlock()
		a := arrival{Dest: "nats " + streamPayments, Seq: int64(len(s.arrivals)), ID: parseID(m.Header.Get(router.HeaderID)),
			Key: m.Header.Get(router.HeaderKey)}
		s.arrivals = append(s.arrivals, a)
		s.ids[a.ID] = true
	})
	must(t, err)
	must(t, sub.SetPendingLimits(-1, -1))
	must(t, nc.Flush())
	s.nc = nc
	return s
}

// seen counts the distinct ids among want that have arrived.
func (s *liveSubscriber) seen(want map[int64]*produced, stream string) (got, of int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, m := range want {
		if m.Stream != stream {
			continue
		}
		of++
		if s.ids[id] {
			got++
		}
	}
	return got, of
}

func (s *liveSubscriber) all() ([]arrival, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival{}, s.arrivals...), s.errs
}
