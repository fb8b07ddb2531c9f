package store

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
)

// seqScans lists the relations an EXPLAIN (FORMAT JSON) plan reads by sequential scan.
func seqScans(p map[string]any, out []string) []string {
	if p["Node Type"] == "Seq Scan" {
		name, _ := p["Relation Name"].(string)
		out = append(out, name)
	}
	if kids, ok := p["Plans"].([]any); ok {
		for _, k := range kids {
			out = seqScans(k.(map[string]any), out)
		}
	}
	return out
}

// TestEveryConsoleStatementIsIndexBackedOnAMillionRows runs, under EXPLAIN, the very
// statements and arguments the console's pages and actions run (the listing and the
// filtered scan with each filter, the count and the chunk of a filtered requeue, the
// streams sample, the blocked keys, a message opened) on a table of 1,000,000 delivered
// rows with a backlog beside them, in both layouts, and fails on any sequential scan.
// Set OUTBOXD_TEST_PLAN_ROWS to try another size.
func TestEveryConsoleStatementIsIndexBackedOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a million rows per layout")
	}
	rows := "1000000"
	if v := os.Getenv("OUTBOXD_TEST_PLAN_ROWS"); v != "" {
		rows = v
	}
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			pg := testenv.NewPGLayout(t, layout)
			s, err := New(pg.Pool, pg.Table)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			q := pg.Table.Qualified()
			for _, seed := range []string{
				`INSERT INTO ` + q + ` (stream, topic, key, payload, status, published_at, created_at)
				 SELECT 's' || (g % 3), 't' || (g % 50), 'k' || (g % 10007), '\x00', 'delivered', now(),
				        now() - interval '1 second' * (` + rows + ` - g) / 100
				 FROM generate_series(1, ` + rows + `) g`,
				`INSERT INTO ` + q + ` (stream, topic, key, payload, status, attempts, last_error)
				 SELECT 's' || (g % 3), 't' || (g % 50), 'k' || (g % 101), '\x00', 'failed', 5, 'broker said no ' || g
				 FROM generate_series(1, 2000) g`,
				`INSERT INTO ` + q + ` (stream, topic, key, payload)
				 SELECT 's' || (g % 3), 't' || (g % 50), 'k' || (g % 101), '\x00' FROM generate_series(1, 2000) g`,
				`ANALYZE ` + q,
			} {
				if _, err := pg.Pool.Exec(ctx, seed); err != nil {
					t.Fatal(err)
				}
			}
			hour := time.Now().Add(-time.Hour)
			base := MessageFilter{Limit: 101}
			with := func(f func(*MessageFilter)) MessageFilter { m := base; f(&m); return m }
			scan := func(f func(*ScanFilter)) ScanFilter {
				sf := ScanFilter{MessageFilter: base, Scan: 10000}
				f(&sf)
				return sf
			}
			type statement struct {
				sql  string
				args []any
			}
			list := func(f MessageFilter) statement { sql, args := s.listStatement(f); return statement{sql, args} }
			scanned := func(f ScanFilter) statement { sql, args := s.scanStatement(f); return statement{sql, args} }
			requeue := func(f RequeueFilter) statement { sql, args := s.requeueStatement(f); return statement{sql, args} }
			count := func(f RequeueFilter) statement { sql, args := s.countStatement(f); return statement{sql, args} }
			for _, c := range []struct {
				name string
				st   statement
			}{
				{"the first page of every message", list(base)},
				{"a page after a cursor", list(with(func(f *MessageFilter) { f.AfterID = 500000 }))},
				{"the failed messages of a stream", list(with(func(f *MessageFilter) { f.Status, f.Stream = "failed", "s1" }))},
				{"the pending messages", list(with(func(f *MessageFilter) { f.Status = "pending" }))},
				{"the delivered messages", list(with(func(f *MessageFilter) { f.Status = "delivered" }))},
				{"an id range of failed messages", list(with(func(f *MessageFilter) { f.Status, f.AfterID, f.ToID = "failed", 1000100, 1000900 }))},
				{"an id range", list(with(func(f *MessageFilter) { f.AfterID, f.ToID = 400000, 400500 }))},
				{"a key across every status", scanned(scan(func(f *ScanFilter) { f.Key = "k7" }))},
				{"a stream alone", scanned(scan(func(f *ScanFilter) { f.Stream = "s1" }))},
				{"a time window among delivered messages", scanned(scan(func(f *ScanFilter) { f.Status, f.Since = "delivered", hour }))},
				{"a topic among delivered messages", scanned(scan(func(f *ScanFilter) { f.Status, f.Topic = "delivered", "t3" }))},
				{"an id range with a stream and a key", scanned(scan(func(f *ScanFilter) {
					f.AfterID, f.ToID, f.Stream, f.Key = 400000, 600000, "s2", "k9"
				}))},
				{"a time range with a topic", scanned(scan(func(f *ScanFilter) { f.Since, f.Until, f.Topic = hour, hour.Add(time.Minute), "t1" }))},
				{"error text among failed messages", scanned(scan(func(f *ScanFilter) { f.Status, f.ErrorContains = "failed", "said NO 1" }))},
				{"error text among a stream's failed messages", scanned(scan(func(f *ScanFilter) {
					f.Status, f.Stream, f.ErrorContains = "failed", "s0", "no 7"
				}))},
				{"a key among pending messages", scanned(scan(func(f *ScanFilter) { f.Status, f.Key = "pending", "k5" }))},
				{"the rows a scan matched", statement{s.inspectSQL(rowsByIDSQL), []any{[]int64{1, 500000, 999999}}}},
				{"the count of a filtered requeue", count(RequeueFilter{Stream: "s1", Key: "k3", ErrorContains: "no", ToID: 1001000})},
				{"a chunk of a filtered requeue", requeue(RequeueFilter{Stream: "s1", Topic: "t4", AfterID: 10, Limit: 1000})},
				{"the streams sample", statement{s.sql.backlog, []any{[]string{"s0", "s1", "s2"}, s.countLimit + 1}}},
				{"the streams estimate", statement{s.sql.backlogSample, []any{[]string{"s0", "s1", "s2"}, 1.0}}},
				{"the blocked keys", statement{render(blockedSQL, s.table), []any{[]string{"s0", "s1", "s2"}}}},
				{"the unserved streams", statement{render(unservedSQL, s.table), []any{[]string{"s0"}, 1 + MaxUnservedStreams}}},
				{"the streams with a backlog", statement{s.inspectSQL(streamsSQL), nil}},
				{"a message opened", statement{s.inspectSQL(getMessageSQL), []any{int64(500000), 4096}}},
			} {
				t.Run(c.name, func(t *testing.T) {
					var raw []byte
					if err := pg.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+c.st.sql, c.st.args...).Scan(&raw); err != nil {
						t.Fatal(err)
					}
					var plan []map[string]map[string]any
					if err := json.Unmarshal(raw, &plan); err != nil {
						t.Fatal(err)
					}
					if seq := seqScans(plan[0]["Plan"], nil); len(seq) > 0 {
						t.Errorf("sequential scan of %s on %s rows:\n%s", strings.Join(seq, ", "), rows, raw)
					}
				})
			}
		})
	}
}
