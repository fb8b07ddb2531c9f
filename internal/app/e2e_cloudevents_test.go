package app

import (
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// A cloudevents stream through two dispatchers, real PostgreSQL and JetStream, with rows
// that cannot be events mixed in: every good row arrives once as an event whose id is its
// de-duplication id, every bad one fails at once with the reason and is counted among
// the stream's failed rows, and none is lost.
func TestACloudEventsStreamDeliversEveryGoodRowAsAnEventAndFailsTheRestWithTheReason(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.cfg.Streams["shipments"]
	s.Format, s.CloudEvents = config.FormatCloudEvents, config.CloudEvents{Source: "urn:e2e:shipments"} // no default type
	w.cfg.Streams["shipments"] = s
	must(t, w.cfg.Validate())

	// Of every ten rows: one without a type, one with an invalid extension name.
	const n = 3000
	_, err := w.pg.Pool.Exec(w.ctx, `INSERT INTO `+w.pg.Table.Qualified()+` (stream, topic, key, headers, payload)
		SELECT 'shipments', 'sent', 'key-' || (g % 50),
		       CASE g % 10 WHEN 0 THEN '{"content-type": "application/json"}'
		                   WHEN 1 THEN '{"ce-type": "e2e.sent", "ce-trace_id": "x"}'
		                   ELSE '{"ce-type": "e2e.sent", "content-type": "application/json", "ce-region": "eu1"}' END::jsonb,
		       convert_to('{"n":' || g || '}', 'UTF8')
		FROM generate_series(1, $1) g`, n)
	must(t, err)
	w.startDispatcher(t, "replica-a")
	w.startDispatcher(t, "replica-b")

	deadline := time.Now().Add(3 * time.Minute)
	for {
		c := w.statusCounts(t)["shipments"]
		if c["delivered"]+c["failed"] == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within 3 minutes: %v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}

	type row struct{ dedupID, status, lastError string }
	rows := map[int64]row{}
	pgRows, err := w.pg.Pool.Query(w.ctx, `SELECT id, dedup_id::text, status::text, coalesce(last_error, '') FROM `+w.pg.Table.Qualified())
	must(t, err)
	for pgRows.Next() {
		var id int64
		var r row
		must(t, pgRows.Scan(&id, &r.dedupID, &r.status, &r.lastError))
		rows[id] = r
	}
	must(t, pgRows.Err())
	var noType, badName, good int
	for id, r := range rows {
		switch {
		case strings.Contains(r.lastError, "has no event type: set the row header ce-type"):
			noType++
		case strings.Contains(r.lastError, `row header "ce-trace_id"`) && strings.Contains(r.lastError, "only the letters a-z and digits"):
			badName++
		case r.status == "delivered":
			good++
		default:
			t.Fatalf("row %d: status %s, last_error %q", id, r.status, r.lastError)
		}
		if r.status == "failed" && !strings.Contains(r.lastError, "cloudevents: ") {
			t.Errorf("row %d failed with %q; want the cloudevents reason", id, r.lastError)
		}
	}
	if noType != n/10 || badName != n/10 || good != n-2*n/10 {
		t.Fatalf("%d rows without a type and %d with a bad name failed, %d delivered; want %d, %d and %d",
			noType, badName, good, n/10, n/10, n-2*n/10)
	}

	var owners int
	must(t, w.pg.Pool.QueryRow(w.ctx, `SELECT count(DISTINCT owner) FROM `+w.pg.Table.Qualified()).Scan(&owners))
	if owners < 2 {
		t.Fatalf("only %d dispatcher(s) took part", owners)
	}
	st, err := store.New(w.pg.Pool, w.pg.Table)
	must(t, err)
	backlogs, err := st.Backlogs(w.ctx, []string{"shipments"})
	must(t, err)
	if len(backlogs) != 1 || backlogs[0].Failed != int64(2*n/10) {
		t.Fatalf("stats: %+v; want %d failed rows of shipments", backlogs, 2*n/10)
	}

	// Every delivered row arrived once, as an event whose id is its dedup id.
	nc, err := natsgo.Connect(w.js.URL())
	must(t, err)
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	must(t, err)
	js, err := jsc.Stream(w.ctx, "SHIPMENTS")
	must(t, err)
	info, err := js.Info(w.ctx)
	must(t, err)
	cons, err := js.OrderedConsumer(w.ctx, jetstream.OrderedConsumerConfig{})
	must(t, err)
	seen := map[int64]int{}
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		must(t, err)
		h := m.Headers()
		id, err := strconv.ParseInt(h.Get(router.HeaderID), 10, 64)
		must(t, err)
		seen[id]++
		r := rows[id]
		if r.status != "delivered" {
			t.Fatalf("row %d (%s, %q) reached the broker", id, r.status, r.lastError)
		}
		if h.Get("ce-id") != r.dedupID || h.Get("ce-type") != "e2e.sent" || h.Get("ce-source") != "urn:e2e:shipments" ||
			h.Get("ce-specversion") != "1.0" || h.Get("ce-region") != "eu1" || h.Get("content-type") != "application/json" {
			t.Fatalf("row %d arrived with headers %v; want ce-id %s and the row's attributes", id, h, r.dedupID)
		}
		if _, err := time.Parse(time.RFC3339Nano, h.Get("ce-time")); err != nil {
			t.Fatalf("row %d: ce-time %q: %v", id, h.Get("ce-time"), err)
		}
	}
	for id, r := range rows {
		if r.status == "delivered" && seen[id] != 1 {
			t.Fatalf("delivered row %d arrived %d times", id, seen[id])
		}
	}
	t.Logf("%d events delivered once each, %d rows failed with the reason, across two dispatchers", good, noType+badName)
}
