package testenv

import (
	"net"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is an embedded broker speaking the Kafka wire protocol over TCP (kfake), which
// our kafka-go driver talks to like any cluster. It can be stopped and started again on
// the same port; a restart starts empty, with the same seeded topics.
type Kafka struct {
	t          testing.TB
	partitions int32
	topics     []string
	port       int
	cluster    *kfake.Cluster
}

// NewKafka starts a one-broker cluster for t with topics seeded at the given partition
// count; auto-creation is off, as in a careful production cluster. It stops when t ends.
func NewKafka(t testing.TB, partitions int32, topics ...string) *Kafka {
	t.Helper()
	k := &Kafka{t: t, partitions: partitions, topics: topics}
	k.Start()
	t.Cleanup(k.Stop)
	return k
}

// Addr is the bootstrap address, host:port.
func (k *Kafka) Addr() string { return "127.0.0.1:" + strconv.Itoa(k.port) }

// Cluster exposes the fake cluster for tests that inject faults with its Control hooks.
func (k *Kafka) Cluster() *kfake.Cluster { return k.cluster }

// Start starts the broker (again).
func (k *Kafka) Start() {
	k.t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(k.port)}
	if len(k.topics) > 0 {
		opts = append(opts, kfake.SeedTopics(k.partitions, k.topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		k.t.Fatalf("testenv: start Kafka-protocol broker: %v", err)
	}
	if k.port == 0 {
		_, portStr, err := net.SplitHostPort(c.ListenAddrs()[0])
		if err != nil {
			c.Close()
			k.t.Fatalf("testenv: Kafka listen address: %v", err)
		}
		k.port, _ = strconv.Atoi(portStr)
	}
	k.cluster = c
}

// Stop closes the broker; calling it twice is harmless.
func (k *Kafka) Stop() {
	if k.cluster != nil {
		k.cluster.Close()
		k.cluster = nil
	}
}
