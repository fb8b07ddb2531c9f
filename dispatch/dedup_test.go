package dispatch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/events/metrics"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// ownDatabase is a fixture on an outbox table in a database of t's own, so that its row
// ids start at 1 like every other fresh outbox's.
func ownDatabase(t *testing.T) *fixture {
	t.Helper()
	dsn := testenv.EmptyDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	n := table.Name{Schema: "outbox", Table: "messages"}
	must(t, migrations.Up(ctx, dsn, n))
	pool, err := pgxpool.New(ctx, dsn)
	must(t, err)
	t.Cleanup(pool.Close)
	s, err := store.New(pool, n)
	must(t, err)
	return &fixture{pg: &testenv.PG{DSN: dsn, Table: n, Pool: pool}, store: s, ctx: ctx}
}

func TestTwoOutboxesWhoseRowIdsOverlapStoreEveryMessageInOneJetStreamStream(t *testing.T) {
	t.Parallel()
	a, b := ownDatabase(t), ownDatabase(t)
	srv := testenv.NewNATS(t)
	js, err := jetstream.New(dlNATSClient(t, srv.URL()))
	must(t, err)
	// One stream for both services, with its default duplicate window (two minutes),
	// which the whole test runs inside.
	stream, err := js.CreateStream(a.ctx, jetstream.StreamConfig{Name: "SHARED", Subjects: []string{"shared.>"}})
	must(t, err)

	const n = 50
	idsA, idsB := a.insert(t, "orders", n), b.insert(t, "orders", n)
	if idsA[0] != idsB[0] || idsA[n-1] != idsB[n-1] {
		t.Fatalf("the two outboxes' ids do not overlap (%d..%d and %d..%d): the test would show nothing",
			idsA[0], idsA[n-1], idsB[0], idsB[n-1])
	}
	for _, f := range []*fixture{a, b} {
		cfg := jsdriver.DefaultOptions()
		cfg.URL = srv.URL()
		d, err := jsdriver.New("js", cfg, nil)
		must(t, err)
		t.Cleanup(func() { _ = d.Close() })
		pub, err := router.New([]router.Route{{Stream: "orders", DriverName: "js", Driver: d, TopicPrefix: "shared."}})
		must(t, err)
		p, err := pub.Publisher("orders")
		must(t, err)
		stop := run(t, pipeline(t, f, dispatch.PipelineConfig{}, p, newRecorder()))
		waitFor(t, time.Minute, "every row delivered", func() bool { return f.counts(t)["delivered"] == n })
		stop()
	}

	info, err := stream.Info(a.ctx)
	must(t, err)
	if info.State.Msgs != 2*n {
		t.Fatalf("both outboxes marked their %d rows delivered, but the stream stored %d messages, want %d: "+
			"the broker absorbed the second outbox's messages as duplicates of the first's", n, info.State.Msgs, 2*n)
	}
}

// emitters hands every event to each of its emitters.
type emitters []func(events.Event)

func (es emitters) Emit(e events.Event) {
	for _, emit := range es {
		emit(e)
	}
}

func TestARePublishTheStreamAlreadyHeldIsCountedAsADuplicateOfItsStream(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := testenv.NewNATS(t)
	nc := dlNATSClient(t, srv.URL())
	js, err := jetstream.New(nc)
	must(t, err)
	stream, err := js.CreateStream(f.ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"shop.>"}})
	must(t, err)

	ids := f.insert(t, "orders", 3)
	// An earlier attempt at the first row reached the stream and its PubAck was lost:
	// the stream holds the row's message under the row's dedup id.
	var dedupID string
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT dedup_id::text FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, ids[0]).Scan(&dedupID))
	landed := natsclient.NewMsg("shop.events")
	landed.Header.Set(natsclient.MsgIdHdr, dedupID)
	landed.Data = []byte("m1")
	_, err = js.PublishMsg(f.ctx, landed)
	must(t, err)

	cfg := jsdriver.DefaultOptions()
	cfg.URL = srv.URL()
	d, err := jsdriver.New("js", cfg, nil)
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "js", Driver: d, TopicPrefix: "shop."}})
	must(t, err)
	pub, err := r.Publisher("orders")
	must(t, err)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, map[string]string{"orders": "js"}, map[string]string{"js": "jetstream"}, metrics.BuildInfo{})
	rec := newRecorder()
	stop := run(t, pipeline(t, f, dispatch.PipelineConfig{}, pub, emitters{rec.Emit, m.Handle}))
	waitFor(t, time.Minute, "every row delivered", func() bool { return f.counts(t)["delivered"] == 3 })
	stop()

	duplicates := 0
	for _, it := range rec.iterations() {
		duplicates += it.Duplicates
	}
	if duplicates != 1 || d.Duplicates() != 1 {
		t.Fatalf("iterations report %d duplicates and the driver counted %d, want 1", duplicates, d.Duplicates())
	}
	want := `
# HELP outboxd_broker_duplicates_total Published messages the broker confirmed as duplicates of one it already held under the same de-duplication id (JetStream, postgres): a re-publish after a lost acknowledgement, or ids that collide.
# TYPE outboxd_broker_duplicates_total counter
outboxd_broker_duplicates_total{stream="orders"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outboxd_broker_duplicates_total"); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(f.ctx)
	must(t, err)
	if info.State.Msgs != 3 {
		t.Fatalf("the stream holds %d messages, want 3 (the re-published row once)", info.State.Msgs)
	}
}
