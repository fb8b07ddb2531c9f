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
	advertise  string // announced in metadata instead of the listener's address; "" for none
	dataDir    string // where the log persists across Stop and Start; "" keeps it in memory
}

// KafkaOptions configure NewKafkaWith.
type KafkaOptions struct {
	Partitions int32
	Topics     []string
	// Advertise, when set (host:port), is the broker address announced to clients in
	// metadata instead of the listener's own, so that clients bootstrapping through a
	// proxy at that address keep going through it for every request.
	Advertise string
	// DataDir, when set, persists the log there, so that Stop and Start keep what was
	// written, as a real broker's restart does.
	DataDir string
}

// NewKafkaWith is NewKafka with options; it stops when t ends.
func NewKafkaWith(t testing.TB, o KafkaOptions) *Kafka {
	t.Helper()
	k := &Kafka{t: t, partitions: o.Partitions, topics: o.Topics, advertise: o.Advertise, dataDir: o.DataDir}
	k.Start()
	t.Cleanup(k.Stop)
	return k
}

// advertised is a listener that announces another address (a proxy in front of it).
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// NewKafka starts a one-broker cluster for t with topics seeded at the given partition
// count; auto-creation is off, as in a careful production cluster. It stops when t ends.
func NewKafka(t testing.TB, partitions int32, topics ...string) *Kafka {
	t.Helper()
	k := &Kafka{t: t, partitions: partitions, topics: topics}
	k.Start()
	t.Cleanup(k.Stop)
	return k
}

// Addr is the bootstrap address, host:port: the broker's own listener, also when it
// advertises another address.
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
	if k.dataDir != "" {
		opts = append(opts, kfake.DataDir(k.dataDir))
	}
	listened := 0 // the port the listener really took, when it advertises another
	if k.advertise != "" {
		adv, err := net.ResolveTCPAddr("tcp", k.advertise)
		if err != nil {
			k.t.Fatalf("testenv: Kafka advertised address %q: %v", k.advertise, err)
		}
		opts = append(opts, kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			listened = ln.Addr().(*net.TCPAddr).Port
			return advertised{Listener: ln, addr: adv}, nil
		}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		k.t.Fatalf("testenv: start Kafka-protocol broker: %v", err)
	}
	if k.port == 0 && listened != 0 {
		k.port = listened
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
