package demo

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/router"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// acceptingPublisher confirms every message at once, as a broker that stored them.
type acceptingPublisher struct{}

func (acceptingPublisher) Publish(_ context.Context, msgs []router.Message) []error {
	return make([]error, len(msgs))
}

// TestDemoBookkeepingHoldsAFewBytesPerMessage measures what the demo keeps per message
// once every message was produced (through PostgreSQL), confirmed and received: it is
// held until the summary, so at the default 100,000 messages it is a share of the
// demo's peak memory. Not parallel, so that other tests' allocations stay out of the
// heap figures.
func TestDemoBookkeepingHoldsAFewBytesPerMessage(t *testing.T) {
	const n, budget = 20000, 64 // messages; bytes per message
	ctx := context.Background()
	dsn := testenv.EmptyDatabase(t)
	if err := migrations.Up(ctx, dsn, demoTable); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	writer, err := producer.New(demoTable)
	if err != nil {
		t.Fatal(err)
	}

	heap := func() uint64 {
		runtime.GC()
		runtime.GC() // and what sync.Pools kept through the first
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	run := newDemoRun(n)
	if err := run.produce(ctx, pool, writer, n, 2, 500, 10); err != nil {
		t.Fatal(err)
	}
	pub := &timedPublisher{next: acceptingPublisher{}.Publish, run: run}
	for first := 0; first < n; first += 500 {
		msgs := make([]router.Message, 500)
		for i := range msgs {
			msgs[i].MessageID = demoIDPrefix + strconv.Itoa(first+i)
		}
		pub.Publish(ctx, msgs)
		for i := range msgs {
			run.receive(run.seq(msgs[i].MessageID))
		}
	}
	s := run.summary(time.Second, 0)
	// What the run holds is what the heap loses when it goes.
	withRun := heap()
	runtime.KeepAlive(pub)
	runtime.KeepAlive(run) // and not a moment longer
	held := int64(withRun) - int64(heap())
	if s.Committed != n*9/10 || s.Delivered != s.Committed || s.Phantoms != n/10 {
		t.Fatalf("summary: %+v", s)
	}
	perMessage := held / n
	t.Logf("%d bytes per message held (%d messages)", perMessage, n)
	if perMessage > budget {
		t.Errorf("the demo holds %d bytes per message (%d KiB for %d); want at most %d", perMessage, held>>10, n, budget)
	}
}

// TestDemoCountsAnArrivalItNeverProducedAsAPhantom: the consumer reads each message's
// de-duplication id, which a driver may qualify (with its table, say); any id that does
// not end in one of this run's sequences is a message nobody committed here.
func TestDemoCountsAnArrivalItNeverProducedAsAPhantom(t *testing.T) {
	t.Parallel()
	run := newDemoRun(10)
	for seq := range 10 {
		run.state[seq] = demoCommitted
	}
	for _, id := range []string{"demo-3", "outboxd_demo.messages:demo-4", "demo-10", "demo--1", "demo-x", "order-5", ""} {
		run.receive(run.seq(id))
	}
	s := run.summary(time.Second, 0)
	if s.Delivered != 2 || s.Phantoms != 5 || s.Lost != 8 {
		t.Errorf("delivered %d, phantoms %d, lost %d; want 2, 5 and 8", s.Delivered, s.Phantoms, s.Lost)
	}
}
