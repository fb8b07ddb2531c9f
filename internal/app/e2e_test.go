package app

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdrv "github.com/outboxd/outboxd/router/jetstream"
	kafkadrv "github.com/outboxd/outboxd/router/kafka"
	natsdrv "github.com/outboxd/outboxd/router/nats"
)

// world is a complete set of real parts: a migrated outbox table, an embedded
// Kafka-protocol broker, and two embedded NATS servers (core, and JetStream), so that
// one broker can be stopped while the others serve.
type world struct {
	pg      *testenv.PG
	kafka   *testenv.Kafka
	core    *testenv.NATSServer
	js      *testenv.NATSServer
	ctx     context.Context
	cfg     config.Config
	streams []string
}

const kafkaTopic = "orders"

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{pg: testenv.NewPG(t), kafka: testenv.NewKafka(t, 3, kafkaTopic), core: testenv.NewNATS(t), js: testenv.NewNATS(t)}
	// The bound of a hung world, well under go test's 20 minutes: the three-dispatcher
	// drain under -race took 243 s of a 4-minute bound in one CI run on a loaded host,
	// 32-45 s alone.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	w.ctx = ctx

	nc, err := natsgo.Connect(w.js.URL())
	must(t, err)
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	must(t, err)
	_, err = jsc.CreateStream(ctx, jetstream.StreamConfig{Name: "SHIPMENTS", Subjects: []string{"shipments.>"}, Storage: jetstream.FileStorage})
	must(t, err)

	cfg := config.Default()
	cfg.DatabaseURL = w.pg.DSN
	cfg.Schema, cfg.TableName = w.pg.Table.Schema, w.pg.Table.Table
	kd := kafkadrv.DefaultOptions()
	kd.Brokers = []string{w.kafka.Addr()}
	nd := natsdrv.DefaultOptions()
	nd.URL = w.core.URL()
	jd := jsdrv.DefaultOptions()
	jd.URL = w.js.URL()
	cfg.Drivers = map[string]config.Driver{"kafka": {Type: kafkadrv.Type, Options: kd}, "nats": {Type: natsdrv.Type, Options: nd},
		"jetstream": {Type: jsdrv.Type, Options: jd}}
	stream := func(driver, prefix string) config.Stream {
		s := config.DefaultStream()
		s.Driver, s.TopicPrefix, s.PollInterval = driver, prefix, 50*time.Millisecond
		s.BackoffInitial, s.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
		return s
	}
	cfg.Streams = map[string]config.Stream{
		"orders":    stream("kafka", ""),
		"payments":  stream("nats", "payments."),
		"shipments": stream("jetstream", "shipments."),
	}
	must(t, cfg.Validate())
	w.cfg = cfg
	w.streams = []string{"orders", "payments", "shipments"}
	return w
}

// startDispatcher runs one outboxd instance; the returned stop waits for it to end.
func (w *world) startDispatcher(t *testing.T, replica string) (stop func()) {
	t.Helper()
	cfg := w.cfg
	cfg.ReplicaID = replica
	logger := slog.New(slog.DiscardHandler)
	d, err := NewDispatcher(w.ctx, &cfg, logger, Options{})
	must(t, err)
	return runDispatcher(t, w.ctx, d, "dispatcher "+replica)
}

// runDispatcher runs d until the returned stop (also a cleanup of t) cancels it and
// waits for Run to end; an error Run returns fails the test, named by what.
func runDispatcher(t *testing.T, ctx context.Context, d *Dispatcher, what string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// produce commits n messages per stream in transactions of 100 and rolls back every
// fifth transaction; it returns the ids committed, per stream. Topics: Kafka "orders",
// NATS "payments.<n>", JetStream "shipments.<n>" (prefixes come from the streams).
func (w *world) produce(t *testing.T, n int) map[string]map[int64]bool {
	t.Helper()
	committed := map[string]map[int64]bool{}
	for _, stream := range w.streams {
		committed[stream] = map[int64]bool{}
		topic := map[string]string{"orders": kafkaTopic, "payments": "captured", "shipments": "sent"}[stream]
		for txn := 0; txn*100 < n; txn++ {
			tx, err := w.pg.Pool.Begin(w.ctx)
			must(t, err)
			rows, err := tx.Query(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, headers, payload)
				SELECT $1, $2, 'key-' || (g % 50), '{"source": "e2e"}', convert_to(repeat('p', 200), 'UTF8')
				FROM generate_series(1, 100) g RETURNING id`, stream, topic)
			must(t, err)
			var ids []int64
			for rows.Next() {
				var id int64
				must(t, rows.Scan(&id))
				ids = append(ids, id)
			}
			must(t, rows.Err())
			if txn%5 == 4 {
				must(t, tx.Rollback(w.ctx))
				continue
			}
			must(t, tx.Commit(w.ctx))
			for _, id := range ids {
				committed[stream][id] = true
			}
		}
	}
	return committed
}

// received counts arrivals per outbox id.
type received struct {
	mu  sync.Mutex
	ids map[int64]int
}

func (r *received) add(t *testing.T, header string) {
	id, err := strconv.ParseInt(header, 10, 64)
	if err != nil {
		t.Errorf("a message arrived without a usable %s header: %q", router.HeaderID, header)
		return
	}
	r.mu.Lock()
	r.ids[id]++
	r.mu.Unlock()
}

func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// consumeCore subscribes to the core NATS subjects before anything is published.
func (w *world) consumeCore(t *testing.T) *received {
	r := &received{ids: map[int64]int{}}
	nc, err := natsgo.Connect(w.core.URL())
	must(t, err)
	t.Cleanup(nc.Close)
	_, err = nc.Subscribe("payments.>", func(m *natsgo.Msg) { r.add(t, m.Header.Get(router.HeaderID)) })
	must(t, err)
	must(t, nc.Flush())
	return r
}

// readJetStream reads every message the SHIPMENTS stream holds.
func (w *world) readJetStream(t *testing.T) *received {
	t.Helper()
	r := &received{ids: map[int64]int{}}
	nc, err := natsgo.Connect(w.js.URL())
	must(t, err)
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	must(t, err)
	s, err := jsc.Stream(w.ctx, "SHIPMENTS")
	must(t, err)
	info, err := s.Info(w.ctx)
	must(t, err)
	cons, err := s.OrderedConsumer(w.ctx, jetstream.OrderedConsumerConfig{})
	must(t, err)
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		must(t, err)
		r.add(t, m.Headers().Get(router.HeaderID))
	}
	return r
}

// readKafka reads every message of the Kafka topic, all partitions.
func (w *world) readKafka(t *testing.T) *received {
	t.Helper()
	r := &received{ids: map[int64]int{}}
	for p := 0; p < 3; p++ {
		conn, err := kafka.DialLeader(w.ctx, "tcp", w.kafka.Addr(), kafkaTopic, p)
		must(t, err)
		end, err := conn.ReadLastOffset()
		must(t, err)
		conn.Close()
		reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{w.kafka.Addr()}, Topic: kafkaTopic, Partition: p, MaxWait: 100 * time.Millisecond})
		for off := int64(0); off < end; off++ {
			m, err := reader.ReadMessage(w.ctx)
			must(t, err)
			for _, h := range m.Headers {
				if h.Key == router.HeaderID {
					r.add(t, string(h.Value))
				}
			}
		}
		reader.Close()
	}
	return r
}

func (w *world) statusCounts(t *testing.T) map[string]map[string]int {
	t.Helper()
	rows, err := w.pg.Pool.Query(w.ctx, `SELECT stream, status, count(*) FROM `+w.pg.Table.Qualified()+` GROUP BY 1, 2`)
	must(t, err)
	out := map[string]map[string]int{}
	for rows.Next() {
		var stream, status string
		var n int
		must(t, rows.Scan(&stream, &status, &n))
		if out[stream] == nil {
			out[stream] = map[string]int{}
		}
		out[stream][status] = n
	}
	must(t, rows.Err())
	return out
}

// waitDelivered waits until every committed row of the streams is delivered.
func (w *world) waitDelivered(t *testing.T, committed map[string]map[int64]bool, streams ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		counts := w.statusCounts(t)
		done := true
		for _, s := range streams {
			if counts[s]["delivered"] != len(committed[s]) {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered within 5 minutes: %v", counts)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// requireExactly checks that every committed id arrived and nothing else did.
func requireExactly(t *testing.T, what string, committed map[int64]bool, got *received) {
	t.Helper()
	for id := range committed {
		if got.ids[id] == 0 {
			t.Fatalf("%s: committed message %d never arrived", what, id)
		}
	}
	dups := 0
	for id, n := range got.ids {
		if !committed[id] {
			t.Fatalf("%s: message %d arrived but was never committed (rolled back?)", what, id)
		}
		dups += n - 1
	}
	t.Logf("%s: %d committed, %d arrived, %d duplicates", what, len(committed), len(got.ids), dups)
}

func TestThreeDispatchersDeliverEveryCommittedMessageToKafkaNATSAndJetStream(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	core := w.consumeCore(t)
	committed := w.produce(t, 12500) // 10,000 committed per stream, 2,500 rolled back
	for _, r := range []string{"replica-a", "replica-b", "replica-c"} {
		w.startDispatcher(t, r)
	}
	w.waitDelivered(t, committed, w.streams...)

	requireExactly(t, "kafka", committed["orders"], w.readKafka(t))
	requireExactly(t, "jetstream", committed["shipments"], w.readJetStream(t))
	deadline := time.Now().Add(30 * time.Second)
	for core.count() < len(committed["payments"]) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // core NATS delivery to our subscriber is asynchronous
	}
	core.mu.Lock()
	requireExactly(t, "nats", committed["payments"], core)
	core.mu.Unlock()

	var owners int
	must(t, w.pg.Pool.QueryRow(w.ctx, `SELECT count(DISTINCT owner) FROM `+w.pg.Table.Qualified()).Scan(&owners))
	if owners < 2 {
		t.Fatalf("only %d dispatcher(s) took part in the drain", owners)
	}
}

func TestABrokerStoppedMidDrainDefersItsStreamWhileOthersFlowAndRecoversAlone(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startDispatcher(t, "replica-a")
	w.startDispatcher(t, "replica-b")
	committed := w.produce(t, 1000)
	w.waitDelivered(t, committed, w.streams...) // every stream flowing

	w.js.Stop() // JetStream goes away mid-drain
	more := w.produce(t, 1000)
	for stream, ids := range more {
		for id := range ids {
			committed[stream][id] = true
		}
	}
	// The other streams drain completely while JetStream is down.
	w.waitDelivered(t, committed, "orders", "payments")
	var deferred, attempts, delivered int
	deadline := time.Now().Add(time.Minute)
	for deferred == 0 {
		must(t, w.pg.Pool.QueryRow(w.ctx, `SELECT count(*) FILTER (WHERE deferred_since IS NOT NULL), coalesce(sum(attempts), 0),
			count(*) FILTER (WHERE status = 'delivered') FROM `+w.pg.Table.Qualified()+` WHERE stream = 'shipments'`).Scan(&deferred, &attempts, &delivered))
		if time.Now().After(deadline) {
			t.Fatal("no shipment was deferred while JetStream was down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if attempts != 0 || delivered != 800 {
		t.Fatalf("while JetStream was down: %d attempts spent, %d delivered (want the 800 from before the outage)", attempts, delivered)
	}

	w.js.Start() // back, same port and store; no operator action
	w.waitDelivered(t, committed, "shipments")
	requireExactly(t, "jetstream after recovery", committed["shipments"], w.readJetStream(t))
	must(t, w.pg.Pool.QueryRow(w.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+w.pg.Table.Qualified()).Scan(&attempts))
	if attempts != 0 {
		t.Fatalf("the outage cost %d attempts", attempts)
	}
}

func TestMessagesEachBrokerRefusesForGoodFailAtOnceWhileTheirBatchesAreDelivered(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	big := strings.Repeat("x", 2<<20) // over NATS's default 1 MiB max_payload
	_, err := w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, payload) VALUES
		('orders', 'no-such-topic', 'x'),
		('payments', 'bad subject', 'x'),
		('shipments', 'sent', convert_to($1, 'UTF8'))`, big)
	must(t, err)
	committed := w.produce(t, 100) // the rest of the batches
	w.startDispatcher(t, "replica-a")
	deadline := time.Now().Add(time.Minute)
	for {
		c := w.statusCounts(t)
		if c["orders"]["failed"] == 1 && c["payments"]["failed"] == 1 && c["shipments"]["failed"] == 1 &&
			c["orders"]["delivered"] == len(committed["orders"]) && c["payments"]["delivered"] == len(committed["payments"]) &&
			c["shipments"]["delivered"] == len(committed["shipments"]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows by stream and status: %v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := w.pg.Pool.Query(w.ctx, `SELECT stream, attempts, last_error FROM `+w.pg.Table.Qualified()+` WHERE status = 'failed' ORDER BY stream`)
	must(t, err)
	want := map[string]string{"orders": "no-such-topic", "payments": "subject", "shipments": "payload"}
	for rows.Next() {
		var stream, lastError string
		var attempts int
		must(t, rows.Scan(&stream, &attempts, &lastError))
		if attempts != 1 || !strings.Contains(strings.ToLower(lastError), want[stream]) {
			t.Errorf("%s failed after %d attempts with %q; want one attempt and a reason mentioning %q", stream, attempts, lastError, want[stream])
		}
	}
	must(t, rows.Err())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestAMessageFailedForGoodIsForwardedToItsStreamsDeadLetterDestination(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	orders := w.cfg.Streams["orders"]
	orders.DeadLetter = config.DeadLetter{Driver: "nats", Topic: "dlq.orders"}
	w.cfg.Streams = map[string]config.Stream{"orders": orders}
	must(t, w.cfg.Validate())

	nc, err := natsgo.Connect(w.core.URL())
	must(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("dlq.orders")
	must(t, err)
	must(t, nc.Flush())

	var id int64
	must(t, w.pg.Pool.QueryRow(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, headers, payload)
		VALUES ('orders', 'no-such-topic', 'k-1', '{"trace": "abc"}', 'the body') RETURNING id`).Scan(&id))
	w.startDispatcher(t, "replica-a")
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no dead letter arrived: %v", err)
	}
	if string(m.Data) != "the body" || m.Header.Get("trace") != "abc" || m.Header.Get(router.HeaderID) != strconv.FormatInt(id, 10) ||
		m.Header.Get("Outbox-Dead-Letter-Stream") != "orders" || m.Header.Get("Outbox-Dead-Letter-Topic") != "no-such-topic" ||
		!strings.Contains(m.Header.Get("Outbox-Dead-Letter-Error"), "no-such-topic") {
		t.Fatalf("dead letter: %q headers %v", m.Data, m.Header)
	}
	var status string
	must(t, w.pg.Pool.QueryRow(w.ctx, `SELECT status FROM `+w.pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&status))
	if status != "failed" {
		t.Fatalf("the row is %s after dead-lettering; it must stay failed", status)
	}
}

func TestADeadLetterBrokerThatIsDownHoldsBackOnlyItsOwnStreamsDeadLetters(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	orders, payments := w.cfg.Streams["orders"], w.cfg.Streams["payments"]
	orders.DeadLetter = config.DeadLetter{Driver: "nats", Topic: "dlq.orders"}
	payments.DeadLetter = config.DeadLetter{Driver: "jetstream", Topic: "shipments.dlq"}
	w.cfg.Streams = map[string]config.Stream{"orders": orders, "payments": payments}
	must(t, w.cfg.Validate())
	w.js.Stop() // the payments stream's dead-letter broker is down throughout

	nc, err := natsgo.Connect(w.core.URL())
	must(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("dlq.orders")
	must(t, err)
	must(t, nc.Flush())
	// Payments fail first, so their dead letters are queued before the orders' one.
	_, err = w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, payload) VALUES ('payments', 'bad subject', 'p')`)
	must(t, err)
	w.startDispatcher(t, "replica-a")
	waitFailed := func(stream string) {
		deadline := time.Now().Add(30 * time.Second)
		for w.statusCounts(t)[stream]["failed"] == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the %s row never failed", stream)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFailed("payments")
	_, err = w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, payload) VALUES ('orders', 'no-such-topic', 'o')`)
	must(t, err)
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the orders dead letter waited behind the payments one: %v", err)
	}
	if string(m.Data) != "o" {
		t.Fatalf("dead letter %q", m.Data)
	}
}
