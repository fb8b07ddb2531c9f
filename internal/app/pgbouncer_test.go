package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/producer"
	"github.com/outboxd/outboxd/router"
	natsdrv "github.com/outboxd/outboxd/router/nats"
)

// pooledWorld is an outbox table behind a PgBouncer of its own in transaction mode, and
// a core NATS server (no duplicate filter, so every publish is seen).
type pooledWorld struct {
	pg             *testenv.PG
	pooled, direct string // database_url through PgBouncer; the direct listen URL
	// pooledApp is the application_name of pooled's server sessions: the world's own, as
	// the PgBouncer tests share a database and one kills its world's sessions by name.
	pooledApp string
	nats      *testenv.NATSServer
	ctx       context.Context
	// dbErrors counts failed claims and write-backs of every replica; firstErr is the first.
	dbErrors atomic.Int64
	firstErr atomic.Value
}

// withAppName sets application_name in a postgres:// URL, so the test can tell the
// server sessions PgBouncer serves outboxd with from the direct ones.
func withAppName(t *testing.T, dsn, name string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	must(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func newPooledWorld(t *testing.T) *pooledWorld {
	t.Helper()
	w := &pooledWorld{pg: testenv.NewPG(t), nats: testenv.NewNATS(t)}
	b := testenv.NewPgBouncer(t, 8)
	w.pooledApp = "outboxd-pooled-" + w.pg.Table.Schema
	w.pooled = withAppName(t, b.DSN(t, w.pg.DSN), w.pooledApp)
	w.direct = withAppName(t, w.pg.DSN, "outboxd-direct")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	w.ctx = ctx
	return w
}

// config is the defaults (poll_interval 1s) with one stream, payments, on core NATS; a
// short lease so that claims cut off by a killed server session come back soon.
func (w *pooledWorld) config(t *testing.T, listenURL string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DatabaseURL, cfg.Database.ListenURL = w.pooled, listenURL
	cfg.Schema, cfg.TableName = w.pg.Table.Schema, w.pg.Table.Table
	cfg.Janitor.Interval = time.Second
	nd := natsdrv.DefaultOptions()
	nd.URL = w.nats.URL()
	cfg.Drivers = map[string]config.Driver{"nats": {Type: natsdrv.Type, Options: nd}}
	s := config.DefaultStream()
	s.Driver, s.TopicPrefix, s.LeaseTTL, s.PublishTimeout = "nats", "payments.", 3*time.Second, 2*time.Second
	s.BackoffInitial, s.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
	cfg.Streams = map[string]config.Stream{"payments": s}
	must(t, cfg.Validate())
	return cfg
}

// start runs a replica until stop, which waits for it to end.
func (w *pooledWorld) start(t *testing.T, cfg config.Config, replica string) (stop func()) {
	t.Helper()
	cfg.ReplicaID = replica
	failed := func(err error) {
		w.dbErrors.Add(1)
		w.firstErr.CompareAndSwap(nil, err.Error())
	}
	d, err := NewDispatcher(w.ctx, &cfg, slog.New(slog.DiscardHandler), Options{Subscribe: func(bus *events.Bus) {
		bus.Subscribe("pgbouncer-test", func(e events.Event) {
			switch e := e.(type) {
			case events.ClaimFailed:
				failed(e.Err)
			case events.Iteration:
				if e.Err != nil {
					failed(e.Err)
				}
			}
		})
	}})
	must(t, err)
	stop = runDispatcher(t, w.ctx, d, "replica "+replica)
	for deadline := time.Now().Add(30 * time.Second); !d.ListenerConnected(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s: the listener did not connect within 30s", replica)
		}
	}
	return stop
}

// pooledArrivals records when each outbox id reached the NATS subscriber, and how often.
type pooledArrivals struct {
	mu    sync.Mutex
	times map[int64]time.Time
	count map[int64]int
}

func (w *pooledWorld) subscribe(t *testing.T) *pooledArrivals {
	t.Helper()
	a := &pooledArrivals{times: map[int64]time.Time{}, count: map[int64]int{}}
	nc, err := natsgo.Connect(w.nats.URL())
	must(t, err)
	t.Cleanup(nc.Close)
	_, err = nc.Subscribe("payments.>", func(m *natsgo.Msg) {
		var id int64
		if _, err := fmt.Sscan(m.Header.Get(router.HeaderID), &id); err != nil {
			t.Errorf("a message without a usable %s header", router.HeaderID)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.count[id] == 0 {
			a.times[id] = time.Now()
		}
		a.count[id]++
	})
	must(t, err)
	must(t, nc.Flush())
	return a
}

// waitFor waits until every id of want has arrived, failing after a minute.
func (a *pooledArrivals) waitFor(t *testing.T, want map[int64]bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a.mu.Lock()
		missing := 0
		for id := range want {
			if a.count[id] == 0 {
				missing++
			}
		}
		a.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d committed messages never arrived", missing, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// producers is how applications write through the pooler: pgx's exec mode on their
// pool (named prepared statements would be missing on the next server session), with
// the producer package or with plain SQL.
func (w *pooledWorld) producers(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(withAppName(t, w.pooled, "producer"))
	must(t, err)
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(w.ctx, pc)
	must(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// produce commits txns transactions of 50 messages from each of two producers at once,
// one through the producer package, one with plain SQL, and returns the ids committed.
// A transaction cut off by a killed server session is tried again; one whose commit
// went unanswered is looked up on the direct connection by its key.
func (w *pooledWorld) produce(t *testing.T, pool *pgxpool.Pool, txns int) map[int64]bool {
	t.Helper()
	writer, err := producer.New(w.pg.Table)
	must(t, err)
	var mu sync.Mutex
	committed := map[int64]bool{}
	write := func(p int, key string) ([]int64, error) {
		tx, err := pool.Begin(w.ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback(w.ctx) }()
		var ids []int64
		for range 50 {
			msg := producer.Message{Stream: "payments", Topic: "captured", Key: key, Payload: []byte("paid")}
			var id int64
			if p == 0 {
				id, err = writer.Enqueue(w.ctx, tx, msg)
			} else {
				err = tx.QueryRow(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, payload)
					VALUES ($1, $2, $3, $4) RETURNING id`, msg.Stream, msg.Topic, msg.Key, msg.Payload).Scan(&id)
			}
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		if err := tx.Commit(w.ctx); err != nil {
			rows, qerr := w.pg.Pool.Query(w.ctx, `SELECT id FROM `+w.pg.Table.Qualified()+` WHERE key = $1`, key)
			must(t, qerr)
			if ids, qerr = pgx.CollectRows(rows, pgx.RowTo[int64]); qerr != nil || len(ids) == 0 {
				return nil, err // not committed: try again
			}
		}
		return ids, nil
	}
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			for n := range txns {
				key := fmt.Sprintf("%s-%d-%d", randomTag(), p, n)
				for attempt := 0; ; attempt++ {
					ids, err := write(p, key)
					if err == nil {
						mu.Lock()
						for _, id := range ids {
							committed[id] = true
						}
						mu.Unlock()
						break
					}
					if attempt == 20 || w.ctx.Err() != nil {
						t.Errorf("producer %d: %v", p, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return committed
}

// randomTag tells one call's transactions from another's.
func randomTag() string { return fmt.Sprint(time.Now().UnixNano()) }

func TestBehindPgBouncerTwoReplicasDeliverEveryMessageAndWakeOnNotifications(t *testing.T) {
	t.Parallel()
	w := newPooledWorld(t)
	cfg := w.config(t, w.direct)
	got := w.subscribe(t)
	pool := w.producers(t)

	// Two replicas through the pooler while two producers write through it too.
	w.start(t, cfg, "replica-a")
	w.start(t, cfg, "replica-b")
	committed := w.produce(t, pool, 20)
	got.waitFor(t, committed)
	got.mu.Lock()
	for id := range committed {
		if n := got.count[id]; n != 1 {
			t.Errorf("message %d arrived %d times; want once", id, n)
		}
	}
	got.mu.Unlock()
	t.Logf("%d committed through PgBouncer, each delivered once", len(committed))
	if n := w.dbErrors.Swap(0); n > 0 {
		t.Errorf("%d claims or write-backs failed through PgBouncer with nothing injected; the first: %v", n, w.firstErr.Load())
	}

	// Server sessions behind the pooler killed while the producers write and the replicas
	// drain: nothing lost. The killing stops once production ends: a batch claimed in a
	// transaction (the default claim mode) needs its server session from the claim to the
	// commit, its publish included, and sessions killed every 20 ms leave it none, so its
	// rows come out once the killing stops (docs/contract.md#claim-modes); a lease claim's
	// statements are short enough to slip between the kills.
	kill, stopKilling := context.WithCancel(w.ctx)
	var killer sync.WaitGroup
	killed := 0
	killer.Go(func() {
		for kill.Err() == nil {
			var n int
			if err := w.pg.Pool.QueryRow(w.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = $1`, w.pooledApp).Scan(&n); err != nil {
				t.Errorf("kill the pooler's server sessions: %v", err)
				return
			}
			killed += n
			time.Sleep(20 * time.Millisecond)
		}
	})
	lost := w.produce(t, pool, 20)
	stopKilling()
	killer.Wait()
	got.waitFor(t, lost)
	got.mu.Lock()
	dups := 0
	for id := range lost {
		dups += got.count[id] - 1
	}
	got.mu.Unlock()
	t.Logf("%d more committed, %d server sessions killed under the replicas (%d claims or write-backs failed), all delivered, %d duplicates",
		len(lost), killed, w.dbErrors.Load(), dups)
	if killed == 0 {
		t.Error("no server session was killed: the failure was not injected")
	}

	// Idle, at the defaults (poll_interval 1s): a single commit wakes a replica through the
	// notification its direct listen connection hears, not on its next poll.
	writer, err := producer.New(w.pg.Table)
	must(t, err)
	var lat []time.Duration
	for range 30 {
		tx, err := pool.Begin(w.ctx)
		must(t, err)
		id, err := writer.Enqueue(w.ctx, tx, producer.Message{Stream: "payments", Topic: "idle", Payload: []byte("x")})
		must(t, err)
		must(t, tx.Commit(w.ctx))
		committedAt := time.Now()
		got.waitFor(t, map[int64]bool{id: true})
		got.mu.Lock()
		lat = append(lat, got.times[id].Sub(committedAt))
		got.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("idle commit → arrival through PgBouncer: p50 %s, p99 %s, max %s", p50, p99, lat[len(lat)-1])
	if p50 > 100*time.Millisecond {
		t.Errorf("idle latency p50 %s; want well under the 1s poll interval (a notification should wake the pipeline)", p50)
	}
}

func TestBehindPgBouncerWithoutAListenURLStartRefusesAndSaysWhatToSet(t *testing.T) {
	t.Parallel()
	w := newPooledWorld(t)
	cfg := w.config(t, "")
	_, err := NewDispatcher(w.ctx, &cfg, slog.New(slog.DiscardHandler), Options{})
	if err == nil || !strings.Contains(err.Error(), "set database.listen_url to a URL that reaches the same PostgreSQL directly") {
		t.Fatalf("start behind PgBouncer without database.listen_url = %v; want a refusal naming database.listen_url", err)
	}

	var stdout, stderr bytes.Buffer
	if err := ConnectCheck(w.ctx, &cfg, &stdout, &stderr); err == nil || !strings.Contains(stderr.String(), "set database.listen_url") {
		t.Errorf("config check --connect without database.listen_url = %v, %q; want the same refusal", err, stderr.String())
	}
	cfg = w.config(t, w.direct)
	stdout.Reset()
	stderr.Reset()
	if err := ConnectCheck(w.ctx, &cfg, &stdout, &stderr); err != nil {
		t.Fatalf("config check --connect with database.listen_url: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"database_url: through a transaction pooler (found by probing)", "database.listen_url postgres://", ": connected"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("config check --connect says\n%s\nwant %q", stdout.String(), want)
		}
	}
}
