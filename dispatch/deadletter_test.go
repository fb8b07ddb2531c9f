package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
	natsdriver "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/store"
)

// dlInsert writes one row with the given key, headers and payload and returns its id.
func dlInsert(t *testing.T, f *fixture, stream, topic, key string, headers map[string]string, payload []byte) int64 {
	t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	var id int64
	must(t, f.pg.Pool.QueryRow(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, headers, payload)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, stream, topic, key, headers, payload).Scan(&id))
	return id
}

// dlRow reads what the table says about one row.
func dlRow(t *testing.T, f *fixture, id int64) (status, lastError string, attempts int) {
	t.Helper()
	must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT status, coalesce(last_error, ''), attempts FROM `+f.pg.Table.Qualified()+
		` WHERE id = $1`, id).Scan(&status, &lastError, &attempts))
	return status, lastError, attempts
}

// dlFailed lists the MessageFailed events the recorder holds.
func dlFailed(r *recorder) []events.MessageFailed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.MessageFailed
	for _, e := range r.events {
		if m, ok := e.(events.MessageFailed); ok {
			out = append(out, m)
		}
	}
	return out
}

// dlCount counts the recorded DeadLetterForwarded events with result res.
func dlCount(r *recorder, res events.DeadLetterResult) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if d, ok := e.(events.DeadLetterForwarded); ok && d.Result == res {
			n++
		}
	}
	return n
}

// dlAwaitIteration waits for the first iteration that claimed rows.
func dlAwaitIteration(t *testing.T, rec *recorder) events.Iteration {
	t.Helper()
	return rec.await(t, 30*time.Second, "an iteration with claimed rows", func(e events.Event) bool {
		it, ok := e.(events.Iteration)
		return ok && it.Claimed > 0
	}).(events.Iteration)
}

// dlAwaitForwarded waits until every id in ids has been forwarded to its dead-letter
// destination.
func dlAwaitForwarded(t *testing.T, rec *recorder, timeout time.Duration, ids []int64) {
	t.Helper()
	want := idSet(ids)
	for len(want) > 0 {
		e := rec.await(t, timeout, fmt.Sprintf("%d more dead letters forwarded", len(want)), func(e events.Event) bool {
			d, ok := e.(events.DeadLetterForwarded)
			return ok && d.Result == events.DeadLetterForwardedOK
		}).(events.DeadLetterForwarded)
		delete(want, e.ID)
	}
}

func TestAPermanentRefusalReportsMessageFailedWithTheRowAndTheStoredError(t *testing.T) {
	t.Parallel()
	f := setup(t)
	headers := map[string]string{"content-type": "application/json"}
	bad := dlInsert(t, f, "orders", "orders.paid", "42", headers, []byte(`{"order":42}`))
	f.insert(t, "orders", 9)
	// A NUL, invalid UTF-8 and a text longer than the store keeps, cut inside a rune: the
	// event must carry what last_error holds, not what the broker said.
	refusal := "bad\x00 header \xff: " + strings.Repeat("é", store.MaxErrorLen)
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
		if m.ID == bad {
			return router.Permanent(errors.New(refusal))
		}
		return nil
	})
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{BatchSize: 10}, pub, rec))
	it := dlAwaitIteration(t, rec)
	if it.Claimed != 10 || it.Failed != 1 || it.Published != 9 {
		t.Fatalf("iteration: %+v", it)
	}
	failed := dlFailed(rec)
	if len(failed) != 1 {
		t.Fatalf("%d MessageFailed events, want 1: %+v", len(failed), failed)
	}
	status, lastError, attempts := dlRow(t, f, bad)
	if status != "failed" {
		t.Fatalf("row status %s", status)
	}
	m := failed[0]
	if m.Stream != "orders" || m.ID != bad || m.Topic != "orders.paid" || string(m.Key) != "42" ||
		m.Headers["content-type"] != "application/json" || string(m.Payload) != `{"order":42}` ||
		m.Attempts != attempts || m.Attempts != 1 || m.Reason != "permanent" {
		t.Fatalf("MessageFailed: %+v", m)
	}
	if m.Err != lastError {
		t.Fatalf("MessageFailed.Err differs from last_error:\n event %q\n row   %q", m.Err, lastError)
	}
}

func TestExhaustedAttemptsReportMessageFailed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	id := dlInsert(t, f, "orders", "orders.paid", "7", map[string]string{"trace": "abc"}, []byte("p"))
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error { return router.Retryable(errRefused) })
	rec := newRecorder()
	run(t, pipeline(t, f, dispatch.PipelineConfig{MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond}, pub, rec))
	m := rec.await(t, 30*time.Second, "MessageFailed", func(e events.Event) bool {
		_, ok := e.(events.MessageFailed)
		return ok
	}).(events.MessageFailed)
	_, lastError, attempts := dlRow(t, f, id)
	if m.ID != id || m.Reason != "attempts_exhausted" || m.Attempts != 3 || attempts != 3 ||
		m.Topic != "orders.paid" || string(m.Key) != "7" || m.Headers["trace"] != "abc" || string(m.Payload) != "p" {
		t.Fatalf("MessageFailed: %+v (row attempts %d)", m, attempts)
	}
	if m.Err != lastError || !strings.Contains(m.Err, "gave up after 3 attempts") {
		t.Fatalf("MessageFailed.Err %q, last_error %q", m.Err, lastError)
	}
	dlAwaitIteration(t, rec) // the failing batch's own iteration follows its MessageFailed
	if n := len(dlFailed(rec)); n != 1 {
		t.Fatalf("%d MessageFailed events for one row", n)
	}
}

func TestMaxDeferReportsMessageFailedWithTheTextTheDatabaseWrote(t *testing.T) {
	t.Parallel()
	for _, maxDefer := range []time.Duration{time.Hour + 1500*time.Millisecond, 50 * time.Hour, 90*time.Second + 5*time.Millisecond} {
		t.Run(maxDefer.String(), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			a := dlInsert(t, f, "orders", "orders.paid", "", nil, []byte("a"))
			b := dlInsert(t, f, "orders", "orders.paid", "", nil, []byte("b"))
			fresh := dlInsert(t, f, "orders", "orders.paid", "", nil, []byte("c"))
			must(t, func() error {
				_, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET deferred_since = now() - interval '100 hours' WHERE id = ANY($1)`, []int64{a, b})
				return err
			}())
			pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
				return router.Unreachable(errors.New("dial tcp 127.0.0.1:4222: connection refused"))
			})
			rec := newRecorder()
			run(t, pipeline(t, f, dispatch.PipelineConfig{MaxDefer: maxDefer, BreakerThreshold: 1000}, pub, rec))
			it := dlAwaitIteration(t, rec)
			failed := dlFailed(rec)
			if it.FailReasons["max_defer"] != len(failed) {
				t.Fatalf("iteration %+v, MessageFailed %+v", it, failed)
			}
			want := map[int64]bool{a: true, b: true}
			if len(failed) != len(want) {
				t.Fatalf("%d MessageFailed events, want %d: %+v", len(failed), len(want), failed)
			}
			for _, m := range failed {
				if !want[m.ID] || m.ID == fresh {
					t.Fatalf("MessageFailed for row %d", m.ID)
				}
				status, lastError, attempts := dlRow(t, f, m.ID)
				if status != "failed" || m.Reason != "max_defer" || m.Attempts != 0 || attempts != 0 {
					t.Fatalf("MessageFailed %+v, row %s attempts %d", m, status, attempts)
				}
				if m.Err != lastError {
					t.Fatalf("MessageFailed.Err differs from last_error:\n event %q\n row   %q", m.Err, lastError)
				}
			}
		})
	}
}

// stealingStore moves the lease of one row away just before the Fail write-back, as a
// janitor reclaiming an expired lease would.
type stealingStore struct {
	*store.Store
	f     *fixture
	steal int64
}

func (s *stealingStore) Fail(ctx context.Context, token store.Token, failures []store.Failure) (store.FailResult, error) {
	if _, err := s.f.pg.Pool.Exec(ctx, `UPDATE `+s.f.pg.Table.Qualified()+
		` SET lease_token = gen_random_uuid() WHERE id = $1`, s.steal); err != nil {
		return store.FailResult{}, err
	}
	return s.Store.Fail(ctx, token, failures)
}

func TestAFailWriteBackThatWasPartlyRefusedReportsExactlyTheRowsItFailed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := f.insert(t, "orders", 4)
	pub := newFakePublisher(func(ctx context.Context, m router.Message) error {
		return router.Permanent(errors.New("not authorised"))
	})
	rec := newRecorder()
	p, err := dispatch.NewPipeline(dispatch.PipelineConfig{Stream: "orders", Owner: "r", BatchSize: 4, PollInterval: 20 * time.Millisecond},
		&stealingStore{Store: f.store, f: f, steal: ids[2]}, pub, rec, nil)
	must(t, err)
	run(t, p)
	it := dlAwaitIteration(t, rec)
	if it.Failed != 3 || it.LeaseConflicts != 1 {
		t.Fatalf("iteration: %+v", it)
	}
	// The three rows this replica failed are reported; the row another replica now
	// owns is not.
	failed := dlFailed(rec)
	if len(failed) != 3 {
		t.Fatalf("MessageFailed after a partly refused write-back: %+v; want the 3 rows failed here", failed)
	}
	for _, e := range failed {
		if e.ID == ids[2] {
			t.Fatalf("the row whose lease moved on was reported failed: %+v", e)
		}
	}
}

// dlScriptedPublisher answers the nth message it is given with result(ctx, n).
type dlScriptedPublisher struct {
	calls  atomic.Int64
	result func(ctx context.Context, n int64) error
}

func (p *dlScriptedPublisher) Publish(ctx context.Context, msgs []router.Message) []error {
	errs := make([]error, len(msgs))
	for i := range msgs {
		errs[i] = p.result(ctx, p.calls.Add(1))
	}
	return errs
}

func dlFailedEvent(stream string, id int64) events.MessageFailed {
	return events.MessageFailed{Stream: stream, ID: id, Topic: "orders.paid", Payload: []byte("x"),
		Attempts: 1, Reason: "permanent", Err: "permanent: too large"}
}

func TestTheForwarderGivesUpAPermanentRefusalAtOnce(t *testing.T) {
	t.Parallel()
	pub := &dlScriptedPublisher{result: func(ctx context.Context, n int64) error {
		return router.Permanent(errors.New("message too large for the dead-letter stream"))
	}}
	rec := newRecorder()
	f := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{{Stream: "orders", Topic: "dlq.orders", Publisher: pub}}, BackoffInitial: time.Hour}, rec, nil)
	defer f.Close()
	f.Handle(dlFailedEvent("orders", 1))
	if pub.calls.Load() != 1 || dlCount(rec, events.DeadLetterGaveUp) != 1 || dlCount(rec, events.DeadLetterRetried) != 0 {
		t.Fatalf("calls %d, events %+v", pub.calls.Load(), rec.events)
	}
}

func TestTheForwarderRetriesWhatMayPassAndCountsEachRetry(t *testing.T) {
	t.Parallel()
	pub := &dlScriptedPublisher{result: func(ctx context.Context, n int64) error {
		switch n {
		case 1:
			return router.Unreachable(errors.New("connection refused"))
		case 2:
			return router.Retryable(errors.New("insufficient resources"))
		}
		return nil
	}}
	rec := newRecorder()
	f := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{{Stream: "orders", Topic: "dlq.orders", Publisher: pub}}, BackoffInitial: time.Millisecond, BackoffMax: 2 * time.Millisecond}, rec, nil)
	defer f.Close()
	f.Handle(dlFailedEvent("orders", 1))
	if pub.calls.Load() != 3 || dlCount(rec, events.DeadLetterRetried) != 2 || dlCount(rec, events.DeadLetterForwardedOK) != 1 {
		t.Fatalf("calls %d, events %+v", pub.calls.Load(), rec.events)
	}
}

func TestCloseInterruptsARetryingForwardAndGivesItUp(t *testing.T) {
	t.Parallel()
	pub := &dlScriptedPublisher{result: func(ctx context.Context, n int64) error {
		return router.Unreachable(errors.New("connection refused"))
	}}
	rec := newRecorder()
	f := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{{Stream: "orders", Topic: "dlq.orders", Publisher: pub}}, BackoffInitial: time.Hour, BackoffMax: time.Hour}, rec, nil)
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		f.Handle(dlFailedEvent("orders", 1))
	}()
	rec.await(t, 10*time.Second, "a retry", func(e events.Event) bool {
		d, ok := e.(events.DeadLetterForwarded)
		return ok && d.Result == events.DeadLetterRetried
	})
	f.Close() // the forwarder is sleeping for up to an hour
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt the retry pause")
	}
	f.Handle(dlFailedEvent("orders", 2)) // after Close: given up without a publish
	if pub.calls.Load() != 1 || dlCount(rec, events.DeadLetterGaveUp) != 2 {
		t.Fatalf("calls %d, events %+v", pub.calls.Load(), rec.events)
	}
	f.Close()
}

func TestTheForwarderIgnoresOtherEventsAndStreamsWithoutARoute(t *testing.T) {
	t.Parallel()
	pub := &dlScriptedPublisher{result: func(context.Context, int64) error { return nil }}
	rec := newRecorder()
	f := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{{Stream: "orders", Topic: "dlq.orders", Publisher: pub}}}, rec, nil)
	defer f.Close()
	for _, e := range []events.Event{events.Iteration{Stream: "orders"}, dlFailedEvent("payments", 1),
		events.DeadLetterForwarded{Stream: "orders", ID: 1, Result: events.DeadLetterRetried}} {
		if f.Wants(e) {
			t.Fatalf("the forwarder wants %T %+v", e, e)
		}
		f.Handle(e)
	}
	if !f.Wants(dlFailedEvent("orders", 1)) {
		t.Fatal("the forwarder does not want a failed message of its own stream")
	}
	if pub.calls.Load() != 0 || len(rec.events) != 0 {
		t.Fatalf("calls %d, events %+v", pub.calls.Load(), rec.events)
	}
}

// dlWiring is a pipeline's bus with a recorder and the dead-letter forwarder on it.
type dlWiring struct {
	bus *events.Bus
	rec *recorder
	fwd *dispatch.DeadLetterForwarder
}

func dlWire(t *testing.T, route dispatch.DeadLetterRoute, queue int) *dlWiring {
	t.Helper()
	w := &dlWiring{bus: events.NewBus(nil), rec: newRecorder()}
	w.bus.Subscribe("recorder", w.rec.Emit)
	w.fwd = dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{route}, BackoffInitial: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond}, w.bus, nil)
	w.bus.SubscribeAsync("deadletter", queue, w.fwd.Handle, events.Filter(w.fwd.Wants))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.fwd.Close()
		if err := w.bus.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return w
}

func dlNATSDriver(t *testing.T, url string) *natsdriver.Driver {
	t.Helper()
	cfg := natsdriver.DefaultOptions()
	cfg.URL = url
	d, err := natsdriver.New("dlq", cfg, nil)
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func dlNATSClient(t *testing.T, url string) *natsclient.Conn {
	t.Helper()
	nc, err := natsclient.Connect(url, natsclient.MaxReconnects(-1), natsclient.ReconnectWait(20*time.Millisecond))
	must(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// dlDriver is a fake publisher as a router's driver.
type dlDriver struct{ *fakePublisher }

func (dlDriver) Close() error { return nil }

// dlPoison refuses rows on topic "poison" for good and confirms the rest.
func dlPoison(ctx context.Context, m router.Message) error {
	if strings.HasSuffix(m.Topic, "poison") {
		return router.Permanent(errors.New("message of 2000000 bytes exceeds the broker's limit"))
	}
	return nil
}

func TestAPermanentlyFailedMessageIsDeadLetteredWithItsHeadersAndTheRowStaysFailed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := testenv.NewNATS(t)
	nc := dlNATSClient(t, srv.URL())
	sub, err := nc.SubscribeSync("dlq.orders")
	must(t, err)
	must(t, nc.Flush())

	bad := dlInsert(t, f, "orders", "poison", "order-42", map[string]string{"content-type": "application/json"}, []byte(`{"order":42}`))
	f.insert(t, "orders", 5)
	// The stream's prefix is the router's: the dead letter names the row's own topic.
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "fake", Driver: dlDriver{newFakePublisher(dlPoison)}, TopicPrefix: "shop.",
		DeadLetter: router.DeadLetter{DriverName: "dlq", Driver: dlNATSDriver(t, srv.URL())}}})
	must(t, err)
	pub, err := rt.Publisher("orders")
	must(t, err)
	dead, err := rt.DeadLetter("orders")
	must(t, err)
	w := dlWire(t, dispatch.DeadLetterRoute{Stream: "orders", Topic: "dlq.orders", Publisher: dead}, 16)
	run(t, pipeline(t, f, dispatch.PipelineConfig{}, pub, w.bus))

	dlAwaitForwarded(t, w.rec, 30*time.Second, []int64{bad})
	msg, err := sub.NextMsg(10 * time.Second)
	must(t, err)
	status, lastError, _ := dlRow(t, f, bad)
	if status != "failed" {
		t.Fatalf("the dead-lettered row is %s", status)
	}
	want := map[string]string{
		router.HeaderID:                   strconv.FormatInt(bad, 10),
		router.HeaderStream:               "orders",
		router.HeaderKey:                  "order-42",
		"content-type":                    "application/json",
		dispatch.HeaderDeadLetterStream:   "orders",
		dispatch.HeaderDeadLetterTopic:    "poison", // the row's topic, not shop.poison
		dispatch.HeaderDeadLetterAttempts: "1",
		dispatch.HeaderDeadLetterReason:   "permanent",
		dispatch.HeaderDeadLetterError:    lastError,
	}
	for k, v := range want {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if string(msg.Data) != `{"order":42}` {
		t.Errorf("payload %q", msg.Data)
	}
	if c := f.counts(t); c["failed"] != 1 || c["delivered"] != 5 {
		t.Fatalf("rows: %v", c)
	}
}

func TestWhileTheDeadLetterBrokerIsDownGoodRowsFlowAndForwardingResumesByItself(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := testenv.NewNATS(t)
	js, err := jetstream.New(dlNATSClient(t, srv.URL()))
	must(t, err)
	stream, err := js.CreateStream(f.ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}, Storage: jetstream.FileStorage})
	must(t, err)
	jcfg := jsdriver.DefaultOptions()
	jcfg.URL = srv.URL()
	dlq, err := jsdriver.New("dlq", jcfg, nil)
	must(t, err)
	t.Cleanup(func() { _ = dlq.Close() })
	srv.Stop()

	const good, bad = 2000, 20
	f.insert(t, "orders", good)
	var badIDs []int64
	for i := range bad {
		badIDs = append(badIDs, dlInsert(t, f, "orders", "poison", "k", nil, []byte("bad-"+strconv.Itoa(i))))
	}
	w := dlWire(t, dispatch.DeadLetterRoute{Stream: "orders", Topic: "dlq.orders", Publisher: dlq}, 64)
	run(t, pipeline(t, f, dispatch.PipelineConfig{BatchSize: 100}, newFakePublisher(dlPoison), w.bus))

	// The pipeline drains everything while the dead-letter broker is down, and the
	// forwarder keeps trying.
	w.rec.await(t, 30*time.Second, "a dead-letter retry", func(e events.Event) bool {
		d, ok := e.(events.DeadLetterForwarded)
		return ok && d.Result == events.DeadLetterRetried
	})
	waitFor(t, time.Minute, "every row settled", func() bool {
		c := f.counts(t)
		return c["delivered"] == good && c["failed"] == bad
	})
	// A batch's iteration is reported just after its write-back committed: await it.
	published, failed := 0, 0
	reported := func() bool {
		published, failed = 0, 0
		for _, it := range w.rec.iterations() {
			published += it.Published
			failed += it.Failed
			if it.Err != nil {
				t.Fatalf("iteration error: %+v", it)
			}
		}
		return published+failed >= good+bad
	}
	waitFor(t, 10*time.Second, "every batch's iteration reported", reported)
	if published != good || failed != bad {
		t.Fatalf("iterations report %d published and %d failed, want %d and %d", published, failed, good, bad)
	}
	if n := dlCount(w.rec, events.DeadLetterForwardedOK); n != 0 {
		t.Fatalf("%d dead letters forwarded to a stopped server", n)
	}

	srv.Start()
	dlAwaitForwarded(t, w.rec, 30*time.Second, badIDs)
	if d := w.bus.Dropped("deadletter"); d != 0 {
		t.Fatalf("the forwarder's queue dropped %d", d)
	}
	info, err := stream.Info(f.ctx)
	must(t, err)
	if info.State.Msgs != bad {
		t.Fatalf("the dead-letter stream holds %d messages, want %d", info.State.Msgs, bad)
	}
	seen := map[int64]bool{}
	for seq := uint64(1); seq <= info.State.Msgs; seq++ {
		m, err := stream.GetMsg(f.ctx, seq)
		must(t, err)
		id, _ := strconv.ParseInt(m.Header.Get(router.HeaderID), 10, 64)
		seen[id] = true
		// The copy's id names the row's own random dedup id, never the row id alone.
		var dedupID string
		must(t, f.pg.Pool.QueryRow(f.ctx, `SELECT dedup_id::text FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&dedupID))
		msgID := m.Header.Get(natsclient.MsgIdHdr)
		if m.Header.Get(dispatch.HeaderDeadLetterReason) != "permanent" || !strings.HasPrefix(string(m.Data), "bad-") ||
			!strings.HasPrefix(msgID, "dead-letter-"+dedupID+"-") || m.Header.Get(router.HeaderMessageID) != msgID {
			t.Fatalf("dead letter %d: headers %v payload %q", seq, m.Header, m.Data)
		}
	}
	for _, id := range badIDs {
		if !seen[id] {
			t.Fatalf("row %d missing from the dead-letter stream", id)
		}
	}
	if c := f.counts(t); c["failed"] != bad {
		t.Fatalf("forwarding changed the table: %v", c)
	}
}

func TestABlockedSubscriberOnTheBusNeitherSlowsThePipelineNorLosesCountOfItsDrops(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := testenv.NewNATS(t)
	const good, bad, queue = 2000, 10, 8
	f.insert(t, "orders", good)
	var badIDs []int64
	for range bad {
		badIDs = append(badIDs, dlInsert(t, f, "orders", "poison", "", nil, []byte("x")))
	}
	w := dlWire(t, dispatch.DeadLetterRoute{Stream: "orders", Topic: "dlq.orders", Publisher: dlNATSDriver(t, srv.URL())}, 64)
	var emitted atomic.Int64
	w.bus.Subscribe("count", func(events.Event) { emitted.Add(1) })
	release := make(chan struct{})
	var handled atomic.Int64
	w.bus.SubscribeAsync("slow", queue, func(events.Event) {
		handled.Add(1)
		<-release
	})
	defer close(release)

	stop := run(t, pipeline(t, f, dispatch.PipelineConfig{BatchSize: 50}, newFakePublisher(dlPoison), w.bus))
	waitFor(t, time.Minute, "every row settled", func() bool {
		c := f.counts(t)
		return c["delivered"] == good && c["failed"] == bad
	})
	dlAwaitForwarded(t, w.rec, 30*time.Second, badIDs)
	stop() // no emitter is left: the counts are final
	if handled.Load() != 1 {
		t.Fatalf("the blocked subscriber handled %d events", handled.Load())
	}
	n := emitted.Load()
	if n < 2*queue {
		t.Fatalf("only %d events emitted", n)
	}
	// One event taken before blocking, queue events waiting, the rest dropped.
	if d := w.bus.Dropped("slow"); d != uint64(n-queue-1) {
		t.Fatalf("dropped %d of %d events with a queue of %d, want %d", d, n, queue, n-queue-1)
	}
	if d := w.bus.Dropped("deadletter"); d != 0 {
		t.Fatalf("the forwarder's queue dropped %d", d)
	}
}

func TestADeadLetterLeavesThroughTheRoutersMiddlewaresWithoutTheStreamPrefix(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string // what the middleware saw: destination and topic
	note := func(to router.Destination, next router.Sender) router.Sender {
		return func(ctx context.Context, msgs []router.Message) []error {
			mu.Lock()
			for _, m := range msgs {
				seen = append(seen, fmt.Sprintf("%s/%s/dead-letter=%t %s", to.Stream, to.Driver, to.DeadLetter, m.Topic))
			}
			mu.Unlock()
			return next(ctx, msgs)
		}
	}
	dlq := dlDriver{newFakePublisher(nil)}
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "events", Driver: dlDriver{newFakePublisher(nil)}, TopicPrefix: "shop.",
		DeadLetter: router.DeadLetter{DriverName: "dlq", Driver: dlq}}}, router.WithMiddleware(note))
	must(t, err)
	dead, err := rt.DeadLetter("orders")
	must(t, err)
	rec := newRecorder()
	f := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{{Stream: "orders", Topic: "dlq.orders", Publisher: dead}}}, rec, nil)
	defer f.Close()
	f.Handle(dlFailedEvent("orders", 7))
	if dlCount(rec, events.DeadLetterForwardedOK) != 1 || dlq.confirmed[7] != 1 {
		t.Fatalf("the dead letter was not forwarded: events %+v", rec.events)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "orders/dlq/dead-letter=true dlq.orders" {
		t.Fatalf("the middleware saw %q, want the dead letter once, bound for dlq.orders", seen)
	}
}
