//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/internal/chaos"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// The streams every scenario runs, one per driver, and where their messages land.
const (
	streamOrders    = "orders"    // Kafka topic orders (3 partitions); dead letters to DEAD
	streamShipments = "shipments" // JetStream stream SHIPMENTS, subjects shipments.>
	streamPayments  = "payments"  // core NATS subjects payments.>

	kafkaTopic      = "orders"
	kafkaPartitions = 3
	jsStream        = "SHIPMENTS"
	deadStream      = "DEAD"
	deadTopic       = "dlq.orders"
	missingTopic    = "no-such-topic" // a Kafka topic that does not exist: fails for good

	payloadBytes = 200
)

var (
	allStreams = []string{streamOrders, streamShipments, streamPayments}
	rowTopic   = map[string]string{streamOrders: kafkaTopic, streamShipments: "sent", streamPayments: "captured"}
	outboxName = table.Name{Schema: "outbox", Table: "messages"}
)

// settings are one scenario's knobs: the form's, adjusted by the scenario.
type settings struct {
	messages int // the form's, for tuning
	replicas int
	// Stream and janitor settings every replica runs with (docs/configuration.md).
	leaseTTL, publishTimeout, pollInterval time.Duration
	backoffInitial, backoffMax, janitorT   time.Duration
	maxAttempts, batchSize, concurrency    int
	// deadLetterEvery makes every n-th orders message go to a topic that does not
	// exist, so it fails for good and is forwarded to the dead-letter stream (0: none).
	deadLetterEvery int
	// jsLimitFraction, when positive, limits SHIPMENTS to about this fraction of the
	// scenario's shipments, refusing new messages (discard new) once it is full.
	jsLimitFraction float64
	// ordered makes every stream ordered (streams.<name>.ordered, docs/ordering.md).
	ordered bool
	// keys is how many distinct keys the producers write, all together (16 per
	// producer when 0).
	keys int
	// proxyPerReplica gives each replica slot a database proxy of its own
	// (world.dbProxy), so a fault can reach one replica's path alone; else every
	// replica shares pgProxy.
	proxyPerReplica bool
	// flowRate is streams.<name>.flow_rate (0: the default).
	flowRate int
	// claim is streams.<name>.claim ("": the default, auto: transaction for a stream
	// that is not ordered).
	claim string
}

func defaultSettings(f form) settings {
	return settings{
		messages: f.messages, replicas: 3, leaseTTL: f.leaseTTL, publishTimeout: f.publishTimeout, pollInterval: f.pollInterval,
		backoffInitial: f.backoffInitial, backoffMax: f.backoffMax, janitorT: f.janitorInterval,
		maxAttempts: 200, batchSize: 100, concurrency: 2,
	}
}

// world is everything one scenario runs against: its own database behind a proxy, its
// own brokers behind proxies, the replicas, the producers' ledger and the timeline.
type world struct {
	t   *testing.T
	ctx context.Context
	f   form
	sc  *scenario
	set settings
	dir string

	db          database
	pool        *pgxpool.Pool // direct, for producers and the harness
	pgProxy     *chaos.Proxy
	slotProxies map[string]*chaos.Proxy // slot → its own database proxy (proxyPerReplica)

	kafka      *testenv.Kafka
	kafkaProxy *chaos.Proxy
	js         *testenv.NATSServer
	jsProxy    *chaos.Proxy
	dlqProxy   *chaos.Proxy // the dead-letter driver's own way to the same server
	jsLimit    int64        // SHIPMENTS max_bytes while limited (0: none)
	core       *testenv.NATSServer
	coreProxy  *chaos.Proxy
	coreSub    *liveSubscriber

	config string
	ledger *ledger

	mu         sync.Mutex
	replicas   map[string]*replica // slot → its current process
	retired    []*replica          // processes replaced in their slot
	faultStart time.Time
	faultEnd   time.Time
	notes      []string
	errs       []error // found by the monitor: replicas that died on their own
}

func newWorld(t *testing.T, ctx context.Context, f form, sc *scenario) *world {
	t.Helper()
	w := &world{t: t, ctx: ctx, f: f, sc: sc, set: defaultSettings(f), dir: t.TempDir(), replicas: map[string]*replica{}}
	if sc.tune != nil {
		sc.tune(&w.set)
	}
	w.ledger = newLedger()

	w.db = scenarioDatabase(t, sc.name, sc.ownServer)
	w.pgProxy = newProxy(t, w.db.addr)
	if w.set.proxyPerReplica {
		w.slotProxies = map[string]*chaos.Proxy{}
		for i := 1; i <= w.set.replicas; i++ {
			w.slotProxies["r"+strconv.Itoa(i)] = newProxy(t, w.db.addr)
		}
	}
	if !sc.emptyDB {
		must(t, migrations.Plain.Up(ctx, w.db.dsn, outboxName))
	}
	pc, err := pgxpool.ParseConfig(w.db.dsn)
	must(t, err)
	pc.MaxConns = int32(f.producers + 4)
	w.pool, err = pgxpool.NewWithConfig(ctx, pc)
	must(t, err)
	t.Cleanup(w.pool.Close)

	// The broker advertises its proxy, so every request outboxd makes goes through it.
	w.kafkaProxy = newProxy(t, "127.0.0.1:1")
	w.kafka = testenv.NewKafkaWith(t, testenv.KafkaOptions{Partitions: kafkaPartitions, Topics: []string{kafkaTopic},
		Advertise: w.kafkaProxy.Addr(), DataDir: filepath.Join(w.dir, "kafka")})
	w.kafkaProxy.Retarget(w.kafka.Addr())

	w.js = testenv.NewNATS(t)
	w.jsProxy = newProxy(t, hostPort(t, w.js.URL()))
	w.dlqProxy = newProxy(t, hostPort(t, w.js.URL()))
	w.createStreams()

	w.core = testenv.NewNATS(t)
	w.coreProxy = newProxy(t, hostPort(t, w.core.URL()))
	w.coreSub = subscribe(t, w.core.URL(), streamPayments+".>")

	w.writeConfig()
	t.Cleanup(w.stopAll) // registered last: runs first, before the brokers stop
	return w
}

func hostPort(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	must(t, err)
	return u.Host
}

// createStreams creates SHIPMENTS (limited when the scenario says so) and DEAD.
func (w *world) createStreams() {
	nc, err := natsgo.Connect(w.js.URL())
	must(w.t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(w.t, err)
	cfg := jetstream.StreamConfig{Name: jsStream, Subjects: []string{streamShipments + ".>"}, Storage: jetstream.FileStorage}
	if w.set.jsLimitFraction > 0 {
		per := w.storedBytesPerMessage(js)
		// The probe goes once the others exist. Deleting an account's only stream
		// makes the server remove the account's directory in the background, and a
		// stream created meanwhile fails with "error creating store for stream" (seen
		// in CI; nats-server v2.15.2, stream.go's delete).
		defer func() { _ = js.DeleteStream(context.WithoutCancel(w.ctx), "PROBE") }()
		shipments := float64(w.f.messages) / float64(len(allStreams))
		w.jsLimit = int64(shipments*w.set.jsLimitFraction) * per
		cfg.MaxBytes, cfg.Discard = w.jsLimit, jetstream.DiscardNew
	}
	_, err = js.CreateStream(w.ctx, cfg)
	must(w.t, err)
	_, err = js.CreateStream(w.ctx, jetstream.StreamConfig{Name: deadStream, Subjects: []string{"dlq.>"}, Storage: jetstream.FileStorage})
	must(w.t, err)
}

// storedBytesPerMessage measures what one shipment of ours takes in a stream, with the
// headers outboxd adds, in the scratch stream PROBE, which it leaves to the caller.
func (w *world) storedBytesPerMessage(js jetstream.JetStream) int64 {
	s, err := js.CreateStream(w.ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}, Storage: jetstream.FileStorage})
	must(w.t, err)
	m := natsgo.NewMsg("probe." + rowTopic[streamShipments])
	m.Data = make([]byte, payloadBytes)
	m.Header.Set("Outbox-Id", "1234567")
	m.Header.Set("Outbox-Stream", streamShipments)
	m.Header.Set("Outbox-Key", "p1-k12")
	m.Header.Set("Nats-Msg-Id", "1234567")
	m.Header.Set("chaos-n", "1234567")
	_, err = js.PublishMsg(w.ctx, m)
	must(w.t, err)
	info, err := s.Info(w.ctx)
	must(w.t, err)
	return int64(info.State.Bytes)
}

// dbProxy is the proxy between slot's replica and PostgreSQL: its own with
// proxyPerReplica, else the one every replica shares.
func (w *world) dbProxy(slot string) *chaos.Proxy {
	if p := w.slotProxies[slot]; p != nil {
		return p
	}
	return w.pgProxy
}

// replicaDatabaseURL is the database URL through slot's proxy, with the replica's id
// as application_name, so pg_stat_activity and pg_locks tell which replica a backend
// serves.
func (w *world) replicaDatabaseURL(slot, id string) string {
	u, err := url.Parse(w.db.dsn)
	must(w.t, err)
	u.Host = w.dbProxy(slot).Addr()
	q := u.Query()
	q.Set("application_name", id)
	u.RawQuery = q.Encode()
	return u.String()
}

// writeConfig writes the YAML every replica of the scenario reads.
func (w *world) writeConfig() {
	u, err := url.Parse(w.db.dsn)
	must(w.t, err)
	u.Host = w.pgProxy.Addr()
	s := w.set
	stream := func(driver, prefix string) map[string]any {
		m := map[string]any{
			"driver": driver, "batch_size": s.batchSize, "concurrency": s.concurrency,
			"lease_ttl": s.leaseTTL.String(), "publish_timeout": s.publishTimeout.String(),
			"poll_interval": s.pollInterval.String(), "backoff_initial": s.backoffInitial.String(),
			"backoff_max": s.backoffMax.String(), "max_attempts": s.maxAttempts,
		}
		if s.ordered {
			m["ordered"] = true
		}
		if s.flowRate > 0 {
			m["flow_rate"] = s.flowRate
		}
		if s.claim != "" {
			m["claim"] = s.claim
		}
		if prefix != "" {
			m["topic_prefix"] = prefix
		}
		return m
	}
	orders := stream("kafka", "")
	if s.deadLetterEvery > 0 {
		orders["dead_letter"] = map[string]any{"driver": "dlq", "topic": deadTopic}
	}
	cfg := map[string]any{
		"database_url": u.String(),
		"schema":       outboxName.Schema,
		"table":        outboxName.Table,
		"log":          map[string]any{"level": "info", "format": "json"},
		"http":         map[string]any{"addr": "127.0.0.1:0"},
		"janitor":      map[string]any{"interval": s.janitorT.String(), "stats_interval": "1s"},
		"drivers": map[string]any{
			"kafka":     map[string]any{"type": "kafka", "brokers": []string{w.kafkaProxy.Addr()}, "write_timeout": s.publishTimeout.String()},
			"jetstream": map[string]any{"type": "jetstream", "url": "nats://" + w.jsProxy.Addr(), "publish_timeout": s.publishTimeout.String()},
			"dlq":       map[string]any{"type": "jetstream", "url": "nats://" + w.dlqProxy.Addr(), "publish_timeout": s.publishTimeout.String()},
			"nats":      map[string]any{"type": "nats", "url": "nats://" + w.coreProxy.Addr(), "publish_timeout": s.publishTimeout.String()},
		},
		"streams": map[string]any{
			streamOrders:    orders,
			streamShipments: stream("jetstream", streamShipments+"."),
			streamPayments:  stream("nats", streamPayments+"."),
		},
	}
	raw, err := yaml.Marshal(cfg)
	must(w.t, err)
	w.config = filepath.Join(w.dir, "outboxd.yaml")
	must(w.t, os.WriteFile(w.config, raw, 0o644))
}

// startReplica starts a process in slot (a new one, or the next generation of a slot
// whose process was killed) without waiting for it to be ready.
func (w *world) startReplica(slot string, migrate bool, gate string) *replica {
	w.t.Helper()
	w.mu.Lock()
	id := slot
	gen := 1
	if old := w.replicas[slot]; old != nil {
		w.retired = append(w.retired, old)
	}
	for _, r := range w.retired {
		if r.slot == slot {
			gen++
		}
	}
	if gen > 1 {
		id = slot + "." + strconv.Itoa(gen)
	}
	w.mu.Unlock()
	r, err := startReplica(replicaSpec{bin: outboxdBinary(w.t), config: w.config, slot: slot, id: id, dir: w.dir,
		migrate: migrate, gate: gate, databaseURL: w.replicaDatabaseURL(slot, id)})
	must(w.t, err)
	w.mu.Lock()
	w.replicas[slot] = r
	w.mu.Unlock()
	return r
}

// startReplicas starts the scenario's replicas r1..rN and waits until all are ready.
func (w *world) startReplicas() {
	w.t.Helper()
	var rs []*replica
	for i := 1; i <= w.set.replicas; i++ {
		rs = append(rs, w.startReplica("r"+strconv.Itoa(i), false, ""))
	}
	for _, r := range rs {
		w.waitReady(r)
	}
}

func (w *world) waitReady(r *replica) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	must(w.t, r.waitReady(ctx))
}

// replica is the current process of slot.
func (w *world) replica(slot string) *replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replicas[slot]
}

// processes lists every process the scenario ran, current and retired, by id.
func (w *world) processes() []*replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]*replica{}, w.retired...)
	for _, r := range w.replicas {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// live lists the current processes that run and are not stopped.
func (w *world) live() []*replica {
	var out []*replica
	for _, r := range w.processes() {
		r.mu.Lock()
		stopped := r.stopped
		r.mu.Unlock()
		if r.alive() && !stopped && w.replica(r.slot) == r {
			out = append(out, r)
		}
	}
	return out
}

// monitor scrapes every live replica every second, so the latest figures of a process
// survive its kill, and records replicas that die on their own. It ends with ctx.
func (w *world) monitor(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	reported := map[*replica]bool{}
	for {
		for _, r := range w.live() {
			_, _ = r.scrape(ctx)
		}
		for _, r := range w.processes() {
			if err := r.unexpectedExit(); err != nil && !reported[r] {
				reported[r] = true
				w.mu.Lock()
				w.errs = append(w.errs, err)
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeAll scrapes every live replica now; a failure is an error of the scenario.
func (w *world) scrapeAll() error {
	for _, r := range w.live() {
		if _, err := r.scrape(w.ctx); err != nil {
			return err
		}
	}
	return nil
}

// total adds a metric over every process the scenario ran, from each one's latest
// scrape (for a killed process: the last one before its kill).
func (w *world) total(name string, match ...string) float64 {
	var sum float64
	for _, r := range w.processes() {
		if m := r.lastSample(); m != nil {
			sum += m.sum(name, match...)
		}
	}
	return sum
}

// stopAll stops every process still running (SIGTERM; SIGKILL after a wait).
func (w *world) stopAll() {
	for _, r := range w.processes() {
		if r.alive() {
			_ = r.terminate()
		}
	}
}

// markFaultStart records that the fault begins now; markFaultEnd that it is over.
func (w *world) markFaultStart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faultStart = time.Now()
}

func (w *world) markFaultEnd() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faultEnd = time.Now()
}

// note adds a line to the scenario's row in the table.
func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notes = append(w.notes, fmt.Sprintf(format, args...))
	w.t.Logf(format, args...)
}

// hold waits for d or until the scenario ends; it is the length of a fault, not a wait
// for something to happen.
func (w *world) hold(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// await polls cond every 20ms until it holds, fails, or timeout passes.
func (w *world) await(what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not happen within %s", what, timeout)
		}
		select {
		case <-w.ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, w.ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// claimsHeldBy counts the transactions in which replica id holds claimed rows locked
// now (claim: transaction): its sessions that hold the outbox table in ROW SHARE mode,
// the lock FOR UPDATE takes and keeps until the transaction ends.
func (w *world) claimsHeldBy(id string) (int, error) {
	var n int
	err := w.pool.QueryRow(w.ctx, `SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.application_name = $1 AND l.relation = $2::regclass AND l.mode = 'RowShareLock' AND l.granted`,
		id, outboxName.Qualified()).Scan(&n)
	return n, err
}

// leasedBy returns the ids of the rows leased by replica id now.
func (w *world) leasedBy(id string) ([]int64, error) {
	rows, err := w.pool.Query(w.ctx, `SELECT id FROM `+outboxName.Qualified()+` WHERE status = 'leased' AND owner = $1`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// backlog counts the rows not yet written back for good: pending or leased.
func (w *world) backlog(ctx context.Context) (int64, error) {
	var n int64
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxName.Qualified()+` WHERE status IN ('pending', 'leased')`).Scan(&n)
	return n, err
}

// statusCounts counts the table's rows by status.
func (w *world) statusCounts() (map[string]int64, error) {
	rows, err := w.pool.Query(w.ctx, `SELECT status, count(*) FROM `+outboxName.Qualified()+` GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// stopSignal is SIGSTOP, named for the scenarios' readability.
const (
	stopSignal = syscall.SIGSTOP
	contSignal = syscall.SIGCONT
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
