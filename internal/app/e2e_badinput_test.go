package app

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

// The bad-input catalogue, rows: what a producer can write that a broker cannot take,
// or that a producer should not have written at all. Each row runs end to end through
// a real dispatcher, real PostgreSQL and the real drivers (kfake, embedded NATS and
// JetStream). A row the database refuses never reaches the table; a row a broker
// refuses fails alone, at once, with a last_error naming what is wrong, while the good
// rows around it in the same batch are delivered and the stream keeps flowing.

// badRow is one row of the catalogue.
type badRow struct {
	name   string
	stream string // orders: Kafka; payments: core NATS (prefix payments.); shipments: JetStream (prefix shipments.)
	topic  string
	key    *string
	// headers is the headers column as JSON text; "" for {}.
	headers     string
	payload     []byte // nil: one byte
	messageID   *string
	availableAt string // a timestamptz literal; "" for now
	createdAt   string // a timestamptz literal; "" for now

	// The outcome: failed (with every lastError part in last_error, after one
	// attempt), delivered (and, when arrived is set, checked as the broker holds it),
	// or pending (never claimed).
	status    string
	lastError []string
	arrived   func(t *testing.T, got arrival)
}

// arrival is a message as a consumer of the broker sees it.
type arrival struct {
	headers map[string]string
	key     string
	payload []byte
}

func ptr(s string) *string { return &s }

const oneMiB = 1 << 20

func badRows() []badRow {
	big := make([]byte, oneMiB+100_000)
	return []badRow{
		// Kafka.
		{name: "A Kafka topic of 250 characters fails naming Kafka's limit of 249",
			stream: "orders", topic: strings.Repeat("t", 250),
			status: "failed", lastError: []string{"not a valid Kafka topic name", "at most 249 characters", "(250 bytes)"}},
		{name: "A Kafka topic holding a slash fails naming the character",
			stream: "orders", topic: "orders/paid",
			status: "failed", lastError: []string{`"orders/paid"`, "not a valid Kafka topic name", `'/'`}},
		{name: "A Kafka topic holding a space fails naming the character",
			stream: "orders", topic: "orders paid",
			status: "failed", lastError: []string{"not a valid Kafka topic name", `' '`}},
		{name: "A Kafka topic in non-ASCII letters fails naming the character",
			stream: "orders", topic: "bestellungen.größe",
			status: "failed", lastError: []string{"not a valid Kafka topic name", `'ö'`}},
		{name: "A Kafka topic the cluster does not have fails naming it",
			stream: "orders", topic: "no-such-topic",
			status: "failed", lastError: []string{`"no-such-topic"`, "does not exist"}},
		{name: "A payload over Kafka's request limit fails giving the sizes",
			stream: "orders", topic: kafkaTopic, payload: big,
			status: "failed", lastError: []string{"value 1148576", "one produce request may take 1047552", "Message Size Too Large"}},
		{name: "A key over Kafka's request limit fails naming the key's size",
			stream: "orders", topic: kafkaTopic, key: ptr(strings.Repeat("k", oneMiB+100_000)),
			status: "failed", lastError: []string{"key 1148576", "one produce request may take 1047552"}},
		{name: "CR and LF in a header value reach Kafka byte for byte",
			stream: "orders", topic: kafkaTopic, headers: `{"note": "line one\r\nline two"}`,
			status: "delivered", arrived: wantHeader("note", "line one\r\nline two")},
		{name: "Header names NATS refuses reach Kafka unchanged",
			stream: "orders", topic: kafkaTopic, headers: `{"x y: größe": "v", "": "empty name"}`,
			status: "delivered", arrived: func(t *testing.T, got arrival) {
				wantHeader("x y: größe", "v")(t, got)
				wantHeader("", "empty name")(t, got)
			}},
		{name: "A producer header named Outbox-Id cannot forge the id on Kafka",
			stream: "orders", topic: kafkaTopic, headers: `{"Outbox-Id": "1", "Outbox-Stream": "forged"}`,
			status: "delivered", arrived: wantHeader(router.HeaderStream, "orders")},
		{name: "A row made available at -infinity is delivered",
			stream: "orders", topic: kafkaTopic, availableAt: "-infinity", status: "delivered"},
		{name: "A row whose created_at a producer set to -infinity is delivered without stalling its batch",
			stream: "orders", topic: kafkaTopic, createdAt: "-infinity", status: "delivered"},
		{name: "A row made available at infinity waits and is never claimed",
			stream: "orders", topic: kafkaTopic, availableAt: "infinity", status: "pending"},

		// Core NATS.
		{name: "A NATS subject with a space fails naming the whitespace",
			stream: "payments", topic: "captured late",
			status: "failed", lastError: []string{`"payments.captured late"`, "contains whitespace"}},
		{name: "A NATS subject with a wildcard token fails naming the wildcard",
			stream: "payments", topic: "*",
			status: "failed", lastError: []string{`"payments.*"`, `wildcard token "*"`}},
		{name: "A NATS subject with a full wildcard fails naming it",
			stream: "payments", topic: "eu.>",
			status: "failed", lastError: []string{`wildcard token ">"`}},
		{name: "A NATS subject with an empty token fails naming it",
			stream: "payments", topic: "eu..captured",
			status: "failed", lastError: []string{"empty token"}},
		{name: "A NATS subject longer than the server's control line fails without cutting the connection",
			stream: "payments", topic: strings.Repeat("s", 5000),
			status: "failed", lastError: []string{"5009 bytes long", "max_control_line", "at most 3968"}},
		{name: "A NATS header name with a space fails naming the header",
			stream: "payments", topic: "captured", headers: `{"bad name": "v"}`,
			status: "failed", lastError: []string{`header "bad name" has a name NATS refuses`}},
		{name: "A NATS header name with a colon fails naming the header",
			stream: "payments", topic: "captured", headers: `{"a:b": "v"}`,
			status: "failed", lastError: []string{`header "a:b" has a name NATS refuses`}},
		{name: "A NATS header name in non-ASCII letters fails naming the header",
			stream: "payments", topic: "captured", headers: `{"größe": "v"}`,
			status: "failed", lastError: []string{`header "größe" has a name NATS refuses`}},
		{name: "An empty NATS header name fails",
			stream: "payments", topic: "captured", headers: `{"": "v"}`,
			status: "failed", lastError: []string{`header "" has a name NATS refuses`}},
		{name: "CR and LF in a NATS header value fail instead of arriving as spaces",
			stream: "payments", topic: "captured", headers: `{"note": "line one\r\nX-Injected: 1"}`,
			status: "failed", lastError: []string{`header "note" has a value holding CR or LF`}},
		{name: "A NATS header value with surrounding spaces fails instead of arriving trimmed",
			stream: "payments", topic: "captured", headers: `{"note": " padded "}`,
			status: "failed", lastError: []string{`header "note" has a value beginning or ending with whitespace`}},
		{name: "A key holding LF fails on NATS, where it travels as a header",
			stream: "payments", topic: "captured", key: ptr("customer\n7"),
			status: "failed", lastError: []string{`header "Outbox-Key", which carries the row's key,`, "CR or LF"}},
		{name: "A payload over the NATS server's max_payload fails",
			stream: "payments", topic: "captured", payload: big,
			status: "failed", lastError: []string{"maximum payload exceeded"}},
		{name: "Control characters and non-ASCII in a NATS header value arrive unchanged",
			stream: "payments", topic: "captured", headers: `{"note": "größe\u0001\t|"}`,
			status: "delivered", arrived: wantHeader("note", "größe\u0001\t|")},

		// JetStream.
		{name: "A message_id holding LF fails on JetStream, where it travels as Nats-Msg-Id",
			stream: "shipments", topic: "sent", messageID: ptr("order-7\nX-Injected: 1"),
			status: "failed", lastError: []string{`header "Nats-Msg-Id", which carries the row's message_id,`, "CR or LF"}},
		{name: "A JetStream header name with a space fails naming the header",
			stream: "shipments", topic: "sent", headers: `{"bad name": "v"}`,
			status: "failed", lastError: []string{`header "bad name" has a name NATS refuses`}},
		{name: "A payload over the JetStream server's max_payload fails",
			stream: "shipments", topic: "sent", payload: big,
			status: "failed", lastError: []string{"maximum payload exceeded"}},
		{name: "A JetStream subject with a wildcard fails instead of being captured",
			stream: "shipments", topic: "*",
			status: "failed", lastError: []string{`"shipments.*"`, "wildcard"}},

		// Nobody serves it.
		{name: "A row for a stream no replica serves stays pending and is reported",
			stream: "ordres", topic: kafkaTopic, status: "pending"},
	}
}

func wantHeader(name, value string) func(t *testing.T, got arrival) {
	return func(t *testing.T, got arrival) {
		t.Helper()
		if v, ok := got.headers[name]; !ok || v != value {
			t.Errorf("header %q arrived as %q (present %v), want %q; all: %q", name, v, ok, value, got.headers)
		}
	}
}

// goodTopic is a topic every broker of the world takes, per stream.
var goodTopic = map[string]string{"orders": kafkaTopic, "payments": "captured", "shipments": "sent", "ordres": kafkaTopic}

// insertedRow is a catalogue row as inserted, with its good neighbours.
type insertedRow struct {
	badRow
	id         int64
	neighbours []int64
}

// insertCatalogue writes every catalogue row between two good rows of its stream, all
// in one transaction, and returns them.
func insertCatalogue(t *testing.T, w *world, rows []badRow) []insertedRow {
	t.Helper()
	tx, err := w.pg.Pool.Begin(w.ctx)
	must(t, err)
	defer tx.Rollback(w.ctx) // a no-op once committed
	insert := func(r badRow) int64 {
		t.Helper()
		headers := r.headers
		if headers == "" {
			headers = "{}"
		}
		payload := r.payload
		if payload == nil {
			payload = []byte("p")
		}
		nullable := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		var id int64
		err := tx.QueryRow(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+`
			(stream, topic, key, headers, payload, message_id, available_at, created_at)
			VALUES ($1, $2, $3, $4::jsonb, $5, $6,
			        coalesce($7::text::timestamptz, statement_timestamp()),
			        coalesce($8::text::timestamptz, statement_timestamp()))
			RETURNING id`,
			r.stream, r.topic, r.key, headers, payload, r.messageID, nullable(r.availableAt), nullable(r.createdAt)).Scan(&id)
		if err != nil {
			t.Fatalf("insert %s: %v", r.name, err)
		}
		return id
	}
	var out []insertedRow
	for _, r := range rows {
		good := badRow{stream: r.stream, topic: goodTopic[r.stream], headers: `{"role": "neighbour"}`}
		before := insert(good)
		id := insert(r)
		after := insert(good)
		out = append(out, insertedRow{badRow: r, id: id, neighbours: []int64{before, after}})
	}
	must(t, tx.Commit(w.ctx))
	return out
}

// eventLog keeps the events a dispatcher emits.
type eventLog struct {
	mu  sync.Mutex
	all []events.Event
}

func (l *eventLog) add(e events.Event) {
	l.mu.Lock()
	l.all = append(l.all, e)
	l.mu.Unlock()
}

func (l *eventLog) snapshot() []events.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Event(nil), l.all...)
}

// startWatchedDispatcher runs one dispatcher whose events and logs the test sees, and an
// unserved-stream sampler on its store and bus. stop waits for both to end.
func (w *world) startWatchedDispatcher(t *testing.T, replica string) (ev *eventLog, logs *testenv.SyncBuffer, stop func()) {
	t.Helper()
	cfg := w.cfg
	cfg.ReplicaID = replica
	ev, logs = &eventLog{}, &testenv.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	d, err := NewDispatcher(w.ctx, &cfg, logger, Options{Subscribe: func(bus *events.Bus) {
		bus.Subscribe("test", ev.add)
	}})
	must(t, err)
	ctx, cancel := context.WithCancel(w.ctx)
	unserved := dispatch.NewSampler(dispatch.SamplerConfig{Interval: 100 * time.Millisecond,
		Probes: []dispatch.Probe{dispatch.UnservedProbe(d.router.Streams(), d.store, logger)}}, d.bus, logger)
	sampled := make(chan struct{})
	go func() { defer close(sampled); _ = unserved.Run(ctx) }()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-sampled
			if err := <-done; err != nil {
				t.Errorf("dispatcher %s: %v", replica, err)
			}
		})
	}
	t.Cleanup(stop)
	return ev, logs, stop
}

type rowState struct {
	status    string
	attempts  int
	lastError string
}

func (w *world) rowStates(t *testing.T) map[int64]rowState {
	t.Helper()
	rows, err := w.pg.Pool.Query(w.ctx, `SELECT id, status, attempts, coalesce(last_error, '') FROM `+w.pg.Table.Qualified())
	must(t, err)
	out := map[int64]rowState{}
	for rows.Next() {
		var id int64
		var s rowState
		must(t, rows.Scan(&id, &s.status, &s.attempts, &s.lastError))
		out[id] = s
	}
	must(t, rows.Err())
	return out
}

// arrivals collects what consumers of the three brokers received, by outbox id.
type arrivals struct {
	mu   sync.Mutex
	byID map[int64]arrival
}

func (a *arrivals) add(t *testing.T, got arrival) {
	id, err := strconv.ParseInt(got.headers[router.HeaderID], 10, 64)
	if err != nil {
		t.Errorf("a message arrived without a usable %s header: %q", router.HeaderID, got.headers)
		return
	}
	a.mu.Lock()
	a.byID[id] = got
	a.mu.Unlock()
}

func (a *arrivals) get(id int64) (arrival, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	got, ok := a.byID[id]
	return got, ok
}

// subscribeCore records every message on payments.> from now on.
func (w *world) subscribeCore(t *testing.T, into *arrivals) {
	t.Helper()
	nc, err := natsgo.Connect(w.core.URL())
	must(t, err)
	t.Cleanup(nc.Close)
	_, err = nc.Subscribe("payments.>", func(m *natsgo.Msg) {
		h := map[string]string{}
		for k, v := range m.Header {
			h[k] = v[0]
		}
		into.add(t, arrival{headers: h, key: h[router.HeaderKey], payload: m.Data})
	})
	must(t, err)
	must(t, nc.Flush())
}

// collectJetStream records every message the SHIPMENTS stream holds.
func (w *world) collectJetStream(t *testing.T, into *arrivals) {
	t.Helper()
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
		h := map[string]string{}
		for k, v := range m.Headers() {
			h[k] = v[0]
		}
		into.add(t, arrival{headers: h, key: h[router.HeaderKey], payload: m.Data()})
	}
}

// collectKafka records every message of the Kafka topic, all partitions.
func (w *world) collectKafka(t *testing.T, into *arrivals) {
	t.Helper()
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
			h := map[string]string{}
			for _, hd := range m.Headers {
				h[hd.Key] = string(hd.Value)
			}
			into.add(t, arrival{headers: h, key: string(m.Key), payload: m.Value})
		}
		reader.Close()
	}
}

func TestEveryMalformedRowFailsAloneWithItsReasonWhileItsBatchAndStreamFlow(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	got := &arrivals{byID: map[int64]arrival{}}
	w.subscribeCore(t, got)
	catalogue := insertCatalogue(t, w, badRows())
	perStream := map[string]struct{ rows, good, bad, due int }{}
	for _, r := range catalogue {
		n := perStream[r.stream]
		n.rows += 3
		n.good += 2
		if r.status == "failed" {
			n.bad++
		}
		if r.status != "pending" {
			n.due += 3
		} else {
			n.due += 2
		}
		perStream[r.stream] = n
	}
	ev, logs, stop := w.startWatchedDispatcher(t, "replica-badinput")

	// Wait until every row that can finish has finished.
	deadline := time.Now().Add(2 * time.Minute)
	var states map[int64]rowState
	for {
		states = w.rowStates(t)
		done := true
		for _, r := range catalogue {
			if r.status != "pending" && states[r.id].status != r.status {
				done = false
			}
			for _, id := range r.neighbours {
				if r.stream != "ordres" && states[id].status != "delivered" {
					done = false
				}
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			for _, r := range catalogue {
				t.Logf("%s: %+v", r.name, states[r.id])
			}
			t.Fatal("the catalogue did not settle within 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, r := range catalogue {
		t.Run(r.name, func(t *testing.T) {
			s := states[r.id]
			switch r.status {
			case "failed":
				t.Logf("last_error: %s", s.lastError)
				if s.status != "failed" || s.attempts != 1 {
					t.Fatalf("row is %s after %d attempts (%q); want failed after exactly one", s.status, s.attempts, s.lastError)
				}
				for _, part := range r.lastError {
					if !strings.Contains(s.lastError, part) {
						t.Errorf("last_error %q does not say %q", s.lastError, part)
					}
				}
				if !strings.HasPrefix(s.lastError, "permanent: ") {
					t.Errorf("last_error %q is not a permanent refusal", s.lastError)
				}
				if len(s.lastError) > 600 {
					t.Errorf("last_error is %d bytes long; the reason must be readable, not buried", len(s.lastError))
				}
			case "pending":
				if s.status != "pending" || s.attempts != 0 || s.lastError != "" {
					t.Fatalf("row is %+v; want pending, untouched", s)
				}
			case "delivered":
				if s.status != "delivered" {
					t.Fatalf("row is %+v; want delivered", s)
				}
			}
			for _, id := range r.neighbours {
				if n := states[id]; r.stream != "ordres" && (n.status != "delivered" || n.attempts != 0) {
					t.Errorf("good neighbour %d is %+v; want delivered at the first attempt", id, n)
				}
			}
		})
	}

	// Each stream's rows were claimed in one batch, in which the good ones were
	// published and only the bad ones failed.
	for stream, n := range perStream {
		if stream == "ordres" {
			continue
		}
		// The rows are written back before their iteration's event is emitted (after
		// each failure's own events), so the rows' states above can be final while the
		// event is still on its way: wait for it, a few seconds at most.
		var batch events.Iteration
		seen := false
		for wait := time.Now().Add(10 * time.Second); !seen && time.Now().Before(wait); {
			for _, e := range ev.snapshot() {
				if it, ok := e.(events.Iteration); ok && it.Stream == stream && it.Claimed == n.due {
					batch, seen = it, true
					break
				}
			}
			if !seen {
				time.Sleep(10 * time.Millisecond)
			}
		}
		found := false
		if seen {
			found = batch.Published == n.due-n.bad && batch.Failed == n.bad && batch.Retried == 0 && batch.Deferred == 0
			if !found {
				t.Errorf("stream %s: the batch of all %d due rows went %+v; want %d published and %d failed",
					stream, n.due, batch, n.due-n.bad, n.bad)
			}
		}
		if !found {
			t.Errorf("stream %s: no batch held all its %d due rows", stream, n.due)
		}
	}

	// The row nobody serves is reported, named, with its count.
	reportDeadline := time.Now().Add(30 * time.Second)
	for {
		reported := false
		for _, e := range ev.snapshot() {
			if u, ok := e.(events.UnservedStreams); ok && len(u.Streams) == 1 && u.Streams[0].Stream == "ordres" && u.Streams[0].Pending == 3 {
				reported = true
			}
		}
		if reported && strings.Contains(logs.String(), `\"ordres\" (3 pending`) {
			break
		}
		if time.Now().After(reportDeadline) {
			t.Fatalf("the unserved stream was not reported; logs:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What arrived is what was written, and the good neighbours arrived.
	w.collectKafka(t, got)
	w.collectJetStream(t, got)
	for _, r := range catalogue {
		if r.stream == "ordres" {
			continue
		}
		for _, id := range r.neighbours {
			if a, ok := got.get(id); !ok || a.headers["role"] != "neighbour" {
				t.Errorf("%s: good neighbour %d did not arrive (%+v)", r.name, id, a)
			}
		}
		if r.status == "delivered" {
			a, ok := got.get(r.id)
			if !ok {
				t.Errorf("%s: the row was acknowledged but never arrived", r.name)
				continue
			}
			if a.headers[router.HeaderID] != strconv.FormatInt(r.id, 10) {
				t.Errorf("%s: arrived with %s %q", r.name, router.HeaderID, a.headers[router.HeaderID])
			}
			if r.arrived != nil {
				t.Run(r.name+" (as it arrived)", func(t *testing.T) { r.arrived(t, a) })
			}
		}
		if r.status == "failed" {
			if _, ok := got.get(r.id); ok {
				t.Errorf("%s: a row that failed arrived at the broker", r.name)
			}
		}
	}

	// The streams keep flowing: a second wave is delivered by the same dispatcher.
	more := w.produce(t, 100)
	for {
		states := w.rowStates(t)
		left := 0
		for _, ids := range more {
			for id := range ids {
				if states[id].status != "delivered" {
					left++
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows of the second wave not delivered", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
}

func TestTheDatabaseRefusesMalformedRowsAtInsertNamingTheConstraint(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	cases := []struct {
		name       string
		stream     any
		topic      any
		headers    any
		payload    any
		messageID  any
		constraint string // the violated constraint, or
		code       string // the SQLSTATE when no constraint is involved
	}{
		{"Headers that are an array are refused", "orders", "t", `["content-type", "json"]`, "p", nil, "messages_headers_object", ""},
		{"Headers that are a string are refused", "orders", "t", `"content-type: json"`, "p", nil, "messages_headers_object", ""},
		{"Headers that are JSON null are refused", "orders", "t", `null`, "p", nil, "messages_headers_object", ""},
		{"A header value that is a number is refused", "orders", "t", `{"retries": 3}`, "p", nil, "messages_headers_string_values", ""},
		{"A header value that is an object is refused", "orders", "t", `{"a": {"b": "c"}}`, "p", nil, "messages_headers_string_values", ""},
		{"A header value that is null is refused", "orders", "t", `{"a": null}`, "p", nil, "messages_headers_string_values", ""},
		{"A header value that is a list of strings is refused", "orders", "t", `{"a": ["b"]}`, "p", nil, "messages_headers_string_values", ""},
		{"A header value holding NUL is refused by jsonb itself", "orders", "t", `{"a": "x\u0000y"}`, "p", nil, "", "22P05"},
		{"Headers that are not JSON are refused", "orders", "t", `{content-type: json}`, "p", nil, "", "22P02"},
		{"An empty stream is refused", "", "t", `{}`, "p", nil, "messages_stream_not_empty", ""},
		{"An empty topic is refused", "orders", "", `{}`, "p", nil, "messages_topic_not_empty", ""},
		{"A NULL stream is refused", nil, "t", `{}`, "p", nil, "", "23502"},
		{"A NULL topic is refused", "orders", nil, `{}`, "p", nil, "", "23502"},
		{"A NULL payload is refused", "orders", "t", `{}`, nil, nil, "", "23502"},
		{"A NULL headers column is refused", "orders", "t", nil, "p", nil, "", "23502"},
		{"An empty message_id is refused", "orders", "t", `{}`, "p", "", "messages_message_id_not_empty", ""},
		{"A topic holding NUL is refused by PostgreSQL text", "orders", "a\x00b", `{}`, "p", nil, "", "22021"},
		{"A stream that is not valid UTF-8 is refused by PostgreSQL text", "or\xffders", "t", `{}`, "p", nil, "", "22021"},
	}
	// The group returns when every parallel case has run, so the count below sees them all.
	t.Run("rows", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				// Parallel subtests wait for a slot after the parent returns: each bounds its
				// own calls from when it starts.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				tx, err := pg.Pool.Begin(ctx)
				must(t, err)
				defer tx.Rollback(ctx) // the transaction is aborted anyway
				_, err = tx.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, headers, payload, message_id)
					VALUES ($1, $2, $3::text::jsonb, $4::text::bytea, $5)`, c.stream, c.topic, c.headers, c.payload, c.messageID)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) {
					t.Fatalf("insert: %v; want the database to refuse it", err)
				}
				if c.constraint != "" && (pgErr.Code != "23514" || pgErr.ConstraintName != c.constraint) {
					t.Fatalf("refused with %s %q (%s); want check constraint %s", pgErr.Code, pgErr.ConstraintName, pgErr.Message, c.constraint)
				}
				if c.code != "" && pgErr.Code != c.code {
					t.Fatalf("refused with %s (%s); want %s", pgErr.Code, pgErr.Message, c.code)
				}
				// The producer's transaction fails loudly: nothing more runs in it.
				if _, err := tx.Exec(ctx, `SELECT 1`); err == nil || !strings.Contains(err.Error(), "25P02") {
					t.Fatalf("the transaction went on after the refused insert: %v", err)
				}
			})
		}
	})
	var n int
	must(t, pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pg.Table.Qualified()).Scan(&n))
	if n != 0 {
		t.Fatalf("%d refused rows reached the table", n)
	}
}

// A dead letter reports a malformed row on one line: a topic holding CR and LF fails on
// Kafka, and its dead letter still reaches NATS, whose headers cannot carry a line break.
func TestADeadLetterOfAMalformedRowReachesNATSWithItsTopicOnOneLine(t *testing.T) {
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

	_, err = w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, payload)
		VALUES ('orders', E'orders\r\nX-Injected: 1 ', 'the body')`)
	must(t, err)
	w.startDispatcher(t, "replica-a")
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no dead letter arrived: %v", err)
	}
	if got := m.Header.Get("Outbox-Dead-Letter-Topic"); got != "orders X-Injected: 1" {
		t.Fatalf("dead-letter topic header %q; want the row's topic on one line", got)
	}
	if got := m.Header.Get("Outbox-Dead-Letter-Error"); !strings.Contains(got, "not a valid Kafka topic name") || strings.ContainsAny(got, "\r\n") {
		t.Fatalf("dead-letter error header %q", got)
	}
	if m.Header.Get("X-Injected") != "" {
		t.Fatal("a line break in the topic injected a header")
	}
}
