package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/store"
)

// aloneNATS starts an embedded NATS server with the bench's JetStream stream for a test.
func aloneNATS(t *testing.T) *benchNATS {
	t.Helper()
	n, err := startBenchNATS(t.Context(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	return n
}

func TestTheJetStreamAloneClaimerPublishesEveryRowOnceBeforeCommittingIt(t *testing.T) {
	t.Parallel()
	b := newTestBench(t)
	b.opt.set.Messages = 2000
	n := aloneNATS(t)
	b.nats = n
	r, err := b.aloneProcesses(t.Context(), 1, "jetstream")
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
	arrived, dups, err := jetStreamCounter{stream: n.stream}.count(t.Context(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2000 || arrived != 2000 || dups != 0 {
		t.Errorf("the stream holds %d of the %d committed rows, %d copies; want every one once", arrived, len(ids), dups)
	}
}

func TestTheJetStreamAloneClaimerFailsTheRunAndCommitsNothingWhenNoStreamTakesItsMessages(t *testing.T) {
	t.Parallel()
	b := newTestBench(t)
	b.opt.set.Messages = 300
	n := aloneNATS(t)
	b.nats = n
	// Without the stream, every publish is answered "no responders".
	js, err := jetstream.New(n.nc)
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
