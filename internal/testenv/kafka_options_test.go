package testenv_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestAKafkaBrokerWithADataDirKeepsItsLogAcrossARestartAndAdvertisesWhatItIsTold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const advertised = "127.0.0.1:1" // nobody listens there: only metadata names it
	k := testenv.NewKafkaWith(t, testenv.KafkaOptions{Partitions: 1, Topics: []string{"kept"}, Advertise: advertised, DataDir: t.TempDir()})

	conn, err := net.Dial("tcp", k.Addr())
	if err != nil {
		t.Fatal(err)
	}
	kc := kafka.NewConnWith(conn, kafka.ConnConfig{Topic: "kept", Partition: 0})
	brokers, err := kc.Brokers()
	if err != nil {
		t.Fatal(err)
	}
	if len(brokers) != 1 || net.JoinHostPort(brokers[0].Host, strconv.Itoa(brokers[0].Port)) != advertised {
		t.Fatalf("metadata names %v; want only %s", brokers, advertised)
	}
	if _, err := kc.WriteMessages(kafka.Message{Value: []byte("one")}, kafka.Message{Value: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	kc.Close()

	k.Stop()
	k.Start()
	conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", k.Addr())
	if err != nil {
		t.Fatalf("the restarted broker is not on its port: %v", err)
	}
	kc = kafka.NewConnWith(conn, kafka.ConnConfig{Topic: "kept", Partition: 0})
	defer kc.Close()
	first, last, err := kc.ReadOffsets()
	if err != nil || first != 0 || last != 2 {
		t.Fatalf("after a restart the log holds offsets %d..%d (%v); want the 2 messages written before", first, last, err)
	}
}
