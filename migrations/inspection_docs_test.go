package migrations_test

import (
	"os"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// sqlBlocks returns the ```sql blocks of a Markdown file, each with the heading it
// stands under.
func sqlBlocks(t *testing.T, path string) (blocks, headings []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in bool
	var cur strings.Builder
	heading := ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case !in && strings.HasPrefix(line, "#"):
			heading = line
		case !in && strings.TrimSpace(line) == "```sql":
			in = true
			cur.Reset()
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks, headings = append(blocks, cur.String()), append(headings, heading)
		case in:
			cur.WriteString(line + "\n")
		}
	}
	return blocks, headings
}

// Every query docs/sql-inspection.md shows runs, as written, against a table of the
// latest schema holding a row of every status, on both layouts. The blocks run in page
// order, each on its own (autocommit), as a reader would paste them into psql: a later
// block may rely on an earlier one (a replay's id), and a block may commit inside.
func TestEveryQueryOfTheSQLInspectionPageRunsOnBothLayouts(t *testing.T) {
	t.Parallel()
	blocks, headings := sqlBlocks(t, "../docs/sql-inspection.md")
	if len(blocks) < 10 {
		t.Fatalf("found %d SQL blocks in docs/sql-inspection.md", len(blocks))
	}
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			dsn := testenv.EmptyDatabase(t)
			conn, ctx := connect(t, dsn)
			if err := layout.Up(ctx, dsn, table.Default); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, key, payload, expires_at)
				SELECT 'orders', 't', 'k' || (g % 3), 'x', now() + interval '30 seconds' FROM generate_series(1, 12) g;
				UPDATE outbox.messages SET status = 'failed', last_error = 'refused 17' WHERE id IN (1, 2);
				UPDATE outbox.messages SET status = 'expired', last_error = 'expires_at passed before delivery' WHERE id IN (3, 4);
				UPDATE outbox.messages SET status = 'delivered', published_at = now() WHERE id IN (5, 6)`); err != nil {
				t.Fatal(err)
			}
			for i, sql := range blocks {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Errorf("block %d under %q does not run: %v\n%s", i+1, headings[i], err, sql)
				}
			}
		})
	}
}
