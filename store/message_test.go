package store

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
)

// planNodes lists every node type of an EXPLAIN (FORMAT JSON) plan.
func planNodes(p map[string]any, out []string) []string {
	out = append(out, p["Node Type"].(string))
	if kids, ok := p["Plans"].([]any); ok {
		for _, k := range kids {
			out = planNodes(k.(map[string]any), out)
		}
	}
	return out
}

// TestOpeningAMessageReadsItByItsKeyAndCutsThePayload: the console's one new statement
// probes the primary key (no sequential scan on a table of 100,000 rows, in either
// layout), returns the headers whole and the payload cut at the limit with its full
// size, and says when no row has the id.
func TestOpeningAMessageReadsItByItsKeyAndCutsThePayload(t *testing.T) {
	t.Parallel()
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			pg := testenv.NewPGLayout(t, layout)
			s, err := New(pg.Pool, pg.Table)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			q := pg.Table.Qualified()
			if _, err := pg.Pool.Exec(ctx, `INSERT INTO `+q+` (stream, topic, payload, status, published_at)
				SELECT 's', 't', '\x00', 'delivered', now() FROM generate_series(1, 100000)`); err != nil {
				t.Fatal(err)
			}
			var id int64
			if err := pg.Pool.QueryRow(ctx, `INSERT INTO `+q+` (stream, topic, key, headers, payload)
				VALUES ('s', 't', 'k', '{"a": "<b>"}', convert_to(repeat('x', 1000), 'UTF8')) RETURNING id`).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := pg.Pool.Exec(ctx, `ANALYZE `+q); err != nil {
				t.Fatal(err)
			}

			var raw []byte
			if err := pg.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+s.inspectSQL(getMessageSQL), id, 100).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			var plan []map[string]map[string]any
			if err := json.Unmarshal(raw, &plan); err != nil {
				t.Fatal(err)
			}
			nodes := planNodes(plan[0]["Plan"], nil)
			t.Logf("plan: %v", nodes)
			if strings.Contains(strings.Join(nodes, ","), "Seq Scan") {
				t.Errorf("opening message %d scans the table: plan %v", id, nodes)
			}

			m, ok, err := s.GetMessage(ctx, id, 100)
			if err != nil || !ok {
				t.Fatalf("get message %d: ok %v, %v", id, ok, err)
			}
			if m.Key != "k" || m.Headers["a"] != "<b>" || len(m.Payload) != 100 || m.PayloadBytes != 1000 || m.Status != "pending" {
				t.Errorf("message %d: %+v, want key k, header a=<b>, 100 of 1000 payload bytes, pending", id, m)
			}
			if _, ok, err := s.GetMessage(ctx, id+1, 100); err != nil || ok {
				t.Errorf("a message that does not exist: ok %v, %v; want not ok, no error", ok, err)
			}
		})
	}
}
