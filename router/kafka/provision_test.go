package kafka

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

func TestAMissingTopicIsCreatedWithTheProvisionSettingsOnlyWhenProvisioningIsOn(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1)
	cases := []struct {
		name      string
		provision bool
	}{
		{"without provisioning the message fails for good and no topic appears", false},
		{"with provisioning the topic is created with its partitions and the batch is delivered", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(k.Addr())
			cfg.Provision.Enabled, cfg.Provision.Partitions = c.provision, 4
			d := newDriver(t, cfg)
			topic := uniqueTopic("provisioned")
			msgs := numbered(topic, 6, "a", "b", "c")
			errs := d.Publish(testCtx(t), msgs)
			if !c.provision {
				for i, err := range errs {
					if router.KindOf(err) != router.KindPermanent {
						t.Fatalf("message %d: %v (%s), want permanent", i, err, router.KindOf(err))
					}
				}
				return
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			if got := readTopic(t, k.Addr(), topic, len(msgs)); len(got) > 4 {
				t.Fatalf("the topic has messages on %d partitions, want at most 4", len(got))
			}
			codes, err := d.topicMeta(testCtx(t), d.transport, []string{topic}, false)
			if err != nil || codes[topic].code != 0 {
				t.Fatalf("topic metadata: %v %v", codes, err)
			}
			if n := partitionsOf(t, k.Addr(), topic); n != 4 {
				t.Fatalf("the created topic has %d partitions, want 4", n)
			}
		})
	}
}

// partitionsOf is how many partitions topic has on the broker at addr.
func partitionsOf(t *testing.T, addr, topic string) int {
	t.Helper()
	conn, err := kafka.DialContext(testCtx(t), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	return len(parts)
}
