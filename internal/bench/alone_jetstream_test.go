package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/store"
)

// jetStreamAloneBench is a test bench of messages rows with an embedded NATS server
// holding the bench's JetStream stream.
func jetStreamAloneBench(t *testing.T, messages int) *bench {
	t.Helper()
	b := newTestBench(t)
	b.opt.set.Messages = messages
	n, err := startBenchNATS(t.Context(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	b.nats = n
	return b
}

// aloneMovesEveryRowOnce moves b's backlog with one claimer process publishing as
// driver's limit does, and fails t unless counter finds every committed row there once.
func aloneMovesEveryRowOnce(t *testing.T, b *bench, driver string, counter arrivalCounter) {
	t.Helper()
	r, err := b.aloneProcesses(t.Context(), 1, driver)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(b.opt.set.Messages)
	if r.Messages != want || r.MsgsPerSec <= 0 {
		t.Errorf("moved %d at %v msg/s; want %d and a rate", r.Messages, r.MsgsPerSec, want)
	}
	ids, err := b.ids(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	arrived, dups, err := counter.count(t.Context(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(ids)) != want || arrived != want || dups != 0 {
		t.Errorf("%s holds %d of the %d committed rows, %d copies; want every one once", driver, arrived, len(ids), dups)
	}
}

func TestTheJetStreamAloneClaimerPublishesEveryRowOnceBeforeCommittingIt(t *testing.T) {
	t.Parallel()
	b := jetStreamAloneBench(t, 2000)
	aloneMovesEveryRowOnce(t, b, "jetstream", jetStreamCounter{stream: b.nats.stream})
}

func TestTheJetStreamAloneClaimerFailsTheRunAndCommitsNothingWhenNoStreamTakesItsMessages(t *testing.T) {
	t.Parallel()
	b := jetStreamAloneBench(t, 300)
	// Without the stream, every publish is answered "no responders".
	js, err := jetstream.New(b.nats.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), benchJetStream); err != nil {
		t.Fatal(err)
	}
	// A claimer that kept its failed claim's session would not end until the phase's
	// timeout killed it.
	b.opt.timeout = 3 * time.Minute
	start := time.Now()
	_, err = b.aloneProcesses(t.Context(), 1, "jetstream")
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the run took %v to fail: its claimer did not end once it had failed", took.Round(time.Second))
	}
	if err == nil || !strings.Contains(err.Error(), "JetStream answered") {
		t.Fatalf("err %v; want the claimer's failure, naming JetStream's answer", err)
	}
	delivered, err := b.store.BenchCount(context.Background(), 0, true)
	if err != nil || delivered != 0 {
		t.Errorf("%d rows delivered (%v); want none, as no message was stored", delivered, err)
	}
	if undelivered, err := b.store.BenchUndelivered(t.Context(), new(store.BenchBacklogMark)); err != nil || !undelivered {
		t.Errorf("undelivered rows left: %v (%v); want the whole backlog", undelivered, err)
	}
}
