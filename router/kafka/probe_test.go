package kafka

import (
	"errors"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

func TestProbeTellsAnExistingTopicFromAMissingOne(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "orders")
	d := newDriver(t, testConfig(k.Addr()))
	if err := d.Probe(testCtx(t), ""); err != nil {
		t.Fatalf("probing the cluster: %v", err)
	}
	if err := d.Probe(testCtx(t), "orders"); err != nil {
		t.Fatalf("probing an existing topic: %v", err)
	}
	for range 2 { // the second probe finds it still missing
		var missing *router.NoDestinationError
		if err := d.Probe(testCtx(t), "payments"); !errors.As(err, &missing) || missing.Error() != `topic "payments" does not exist` {
			t.Fatalf("probing a missing topic: %v, want a NoDestinationError", err)
		}
	}
	if err := newDriver(t, testConfig(refusingAddr(t))).Probe(testCtx(t), ""); err == nil {
		t.Fatal("probing an absent cluster succeeded")
	}
}
