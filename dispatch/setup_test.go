package dispatch_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakePublisher is a broker stand-in: outcome decides each message's result, and every
// confirmed message is recorded and announced.
type fakePublisher struct {
	mu        sync.Mutex
	outcome   func(ctx context.Context, m router.Message) error
	confirmed map[int64]int // id → confirmed publishes
	calls     int
	announce  chan int64 // receives each confirmed id when not nil (never blocks the publisher)
}

func newFakePublisher(outcome func(ctx context.Context, m router.Message) error) *fakePublisher {
	return &fakePublisher{outcome: outcome, confirmed: map[int64]int{}, announce: make(chan int64, 100000)}
}

func (f *fakePublisher) Publish(ctx context.Context, msgs []router.Message) []error {
	errs := make([]error, len(msgs))
	f.mu.Lock()
	f.calls++
	outcome := f.outcome
	f.mu.Unlock()
	for i, m := range msgs {
		if outcome != nil {
			errs[i] = outcome(ctx, m)
		}
		if errs[i] == nil && ctx.Err() != nil {
			errs[i] = router.Canceled(ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range msgs {
		if errs[i] == nil {
			f.confirmed[m.ID]++
			select {
			case f.announce <- m.ID:
			default:
			}
		}
	}
	return errs
}

func (f *fakePublisher) setOutcome(o func(ctx context.Context, m router.Message) error) {
	f.mu.Lock()
	f.outcome = o
	f.mu.Unlock()
}

func (f *fakePublisher) confirmedIDs() map[int64]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[int64]int, len(f.confirmed))
	for k, v := range f.confirmed {
		out[k] = v
	}
	return out
}

// dicePublisher is a fakePublisher that rolls a die of 1,000 faces for each message,
// from a generator seeded with seed, and lets outcome decide by the roll.
func dicePublisher(seed, stream uint64, outcome func(ctx context.Context, m router.Message, roll int) error) *fakePublisher {
	rng := rand.New(rand.NewPCG(seed, stream))
	var mu sync.Mutex
	return newFakePublisher(func(ctx context.Context, m router.Message) error {
		mu.Lock()
		roll := rng.IntN(1000)
		mu.Unlock()
		return outcome(ctx, m, roll)
	})
}

// confirmedBy sums the confirmed publishes of each id over pubs.
func confirmedBy(pubs []*fakePublisher) map[int64]int {
	confirmed := map[int64]int{}
	for _, p := range pubs {
		for id, n := range p.confirmedIDs() {
			confirmed[id] += n
		}
	}
	return confirmed
}

// recorder collects events for assertions and lets tests await one.
type recorder struct {
	mu     sync.Mutex
	events []events.Event
	notify chan events.Event
}

func newRecorder() *recorder { return &recorder{notify: make(chan events.Event, 10000)} }

func (r *recorder) Emit(e events.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.notify <- e:
	default:
	}
}

// await waits for an event matching match, failing t after timeout.
func (r *recorder) await(t *testing.T, timeout time.Duration, what string, match func(events.Event) bool) events.Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case e := <-r.notify:
			if match(e) {
				return e
			}
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func (r *recorder) iterations() []events.Iteration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Iteration
	for _, e := range r.events {
		if it, ok := e.(events.Iteration); ok {
			out = append(out, it)
		}
	}
	return out
}

type fixture struct {
	pg    *testenv.PG
	store *store.Store
	ctx   context.Context
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pg := testenv.NewPG(t)
	s, err := store.New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return &fixture{pg: pg, store: s, ctx: ctx}
}

func (f *fixture) insert(t *testing.T, stream string, n int) []int64 {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT $1, 'events', 'k' || (g % 7), convert_to('m' || g, 'UTF8') FROM generate_series(1, $2) g RETURNING id`, stream, n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// counts returns the number of rows per status.
//
// A test that kills the table's sessions (killTableSessions) may have killed an idle
// connection of the pool this asks on, which then fails once: it asks again, up to
// three times.
func (f *fixture) counts(t *testing.T) map[string]int {
	t.Helper()
	var err error
	for range 3 {
		var out map[string]int
		if out, err = f.countOnce(); err == nil {
			return out
		}
	}
	t.Fatal(err)
	return nil
}

func (f *fixture) countOnce() (map[string]int, error) {
	rows, err := f.pg.Pool.Query(f.ctx, `SELECT status, count(*) FROM `+f.pg.Table.Qualified()+` GROUP BY status`)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// run starts a pipeline and returns a stop function that cancels it and waits for Run.
func run(t *testing.T, p *dispatch.Pipeline) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("pipeline %s: %v", p.Stream(), err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("pipeline %s did not stop within 30s", p.Stream())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func pipeline(t *testing.T, f *fixture, cfg dispatch.PipelineConfig, pub dispatch.Publisher, emit dispatch.Emitter) *dispatch.Pipeline {
	t.Helper()
	if cfg.Stream == "" {
		cfg.Stream = "orders"
	}
	if cfg.Owner == "" {
		cfg.Owner = "replica-" + cfg.Stream
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	p, err := dispatch.NewPipeline(cfg, f.store, pub, emit, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls cond on the database until it holds; the database is the event here.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var errRefused = errors.New("broker refused: not enough replicas")

func idSet(ids []int64) map[int64]bool {
	s := make(map[int64]bool, len(ids))
	for _, id := range ids {
		s[id] = true
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// killTableSessions terminates every other session holding the outbox table (a held
// claim's transaction among them) and returns how many; 0 when the query fails. With
// app set, only sessions of that application_name: a pooled session picked by its lock
// may have moved on to other work by the time it is killed.
func (f *fixture) killTableSessions(app string) int64 {
	// Bounded: the caller is a publish whose batch holds a pool connection in its claim's
	// transaction, and when every pool connection was so held by batches all asking at
	// once, none was left for this and the test hung until go test's timeout. Then no
	// session is killed this time.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	if err := f.pg.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.relation = $1::regclass AND l.mode = 'RowShareLock' AND l.pid <> pg_backend_pid()
		  AND ($2 = '' OR a.application_name = $2)`, f.pg.Table.Qualified(), app).Scan(&n); err != nil {
		return 0
	}
	return n
}
