package bench

import "testing"

func TestTheKafkaAloneClaimerProducesEveryRowOnceBeforeCommittingIt(t *testing.T) {
	t.Parallel()
	b := newTestBench(t)
	b.opt.set.Messages = 2000
	k, err := startBenchKafka(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.close)
	b.kafka = k
	counter, err := k.mark(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	aloneMovesEveryRowOnce(t, b, "kafka", counter)
}
