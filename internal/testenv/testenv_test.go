package testenv_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestPGGivesEachTestItsOwnMigratedTable(t *testing.T) {
	t.Parallel()
	a, b := testenv.NewPG(t), testenv.NewPG(t)
	if a.Table == b.Table {
		t.Fatalf("two tests share table %s", a.Table)
	}
	ctx := context.Background()
	if _, err := a.Pool.Exec(ctx, "INSERT INTO "+a.Table.Qualified()+" (stream, topic, payload) VALUES ('s', 't', 'x')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.Pool.QueryRow(ctx, "SELECT count(*) FROM "+b.Table.Qualified()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("table %s sees %d rows written to %s", b.Table, n, a.Table)
	}
}

func TestEmbeddedNATSServesCoreAndJetStreamAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sub, err := nc.SubscribeSync("core.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("core.x", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(msg.Data) != "hello" {
		t.Fatalf("core NATS round trip: %v %v", msg, err)
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the same message id twice: the server keeps one
		ack, err := js.Publish(ctx, "orders.created", []byte("o-1"), jetstream.WithMsgID("outbox-1"))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate != (i == 1) {
			t.Fatalf("publish %d: duplicate=%v", i, ack.Duplicate)
		}
	}

	srv.Stop()
	srv.Start()
	if _, err := js.Publish(ctx, "orders.updated", []byte("o-1"), jetstream.WithMsgID("outbox-2")); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (one de-duplicated, one after restart)", info.State.Msgs)
	}
}

func TestEmbeddedKafkaRoundTripsKeysHeadersAndOrderWithKafkaGo(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 3, "events")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := &kafka.Writer{
		Addr:         kafka.TCP(k.Addr()),
		Topic:        "events",
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
	}
	defer w.Close()
	const n = 30
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{
			Key:     []byte("key-" + strconv.Itoa(i%3)),
			Value:   []byte(strconv.Itoa(i)),
			Headers: []kafka.Header{{Key: "outbox-id", Value: []byte(strconv.Itoa(i))}},
		}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}

	got := map[string][]int{} // key → values in partition order
	partitionOf := map[string]int{}
	for p := 0; p < 3; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.Addr()}, Topic: "events", Partition: p, MaxWait: 50 * time.Millisecond})
		last, err := kafka.DialLeader(ctx, "tcp", k.Addr(), "events", p)
		if err != nil {
			t.Fatal(err)
		}
		end, err := last.ReadLastOffset()
		last.Close()
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < end; off++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read partition %d: %v", p, err)
			}
			v, _ := strconv.Atoi(string(m.Value))
			if len(m.Headers) != 1 || string(m.Headers[0].Value) != string(m.Value) {
				t.Fatalf("message %d lost its header: %v", v, m.Headers)
			}
			key := string(m.Key)
			if q, ok := partitionOf[key]; ok && q != p {
				t.Fatalf("key %s landed on partitions %d and %d", key, q, p)
			}
			partitionOf[key] = p
			got[key] = append(got[key], v)
		}
		r.Close()
	}
	total := 0
	for key, vs := range got {
		for i := 1; i < len(vs); i++ {
			if vs[i] < vs[i-1] {
				t.Fatalf("key %s out of order: %v", key, vs)
			}
		}
		total += len(vs)
	}
	if total != n {
		t.Fatalf("read %d messages, wrote %d", total, n)
	}
}
