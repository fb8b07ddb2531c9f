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
	r, err := b.aloneProcesses(t.Context(), 1, "kafka")
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages != 2000 || r.MsgsPerSec <= 0 {
		t.Errorf("moved %d at %v msg/s; want 2000 and a rate", r.Messages, r.MsgsPerSec)
	}
	ids, err := b.ids(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	arrived, dups, err := counter.count(t.Context(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2000 || arrived != 2000 || dups != 0 {
		t.Errorf("the topic holds %d of the %d committed rows, %d copies; want every one once", arrived, len(ids), dups)
	}
}
