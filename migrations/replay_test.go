package migrations_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// TestTheReplaySnippetsOfTheSQLGuideRunAsWritten runs every SQL block of the Replay
// section of docs/sql-inspection.md, in order, on a table of the default name in a
// database of its own (so the first replay's id is 1, as the snippets say), and checks
// that they replay what they claim.
func TestTheReplaySnippetsOfTheSQLGuideRunAsWritten(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/sql-inspection.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "\n## Replay\n")
	if start < 0 {
		t.Fatal("docs/sql-inspection.md has no Replay section")
	}
	section = section[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 5 {
		t.Fatalf("the Replay section has %d SQL blocks; want the plan, start, loop, progress, cancel and horizon", len(blocks))
	}

	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	if err := migrations.Up(ctx, dsn, table.Name{Schema: "outbox", Table: "messages"}); err != nil {
		t.Fatal(err)
	}
	// 2,500 delivered rows of orders in the last hour, 10 older than the window, and
	// rows of another stream.
	if _, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload, created_at, status, published_at)
		SELECT s, 't', 'x', now() - (CASE WHEN g <= 10 THEN interval '7 hours' ELSE interval '1 hour' END), 'delivered', now()
		FROM generate_series(1, 2510) g, (VALUES ('orders'), ('payments')) v(s)`); err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		if _, err := conn.Exec(ctx, b[1]); err != nil {
			t.Fatalf("SQL block %d of the Replay section failed: %v\n%s", i+1, err, b[1])
		}
	}
	var copies, copied int
	var state string
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox.messages WHERE headers ->> 'Outbox-Replay' = '1'),
		copied, state FROM outbox.messages_replays WHERE id = 1`).Scan(&copies, &copied, &state); err != nil {
		t.Fatal(err)
	}
	if copies != 2500 || copied != 2500 || state != "done" {
		t.Fatalf("after the snippets: %d copies, replay 1 %s with %d copied; want the 2,500 rows of the window copied, done", copies, state, copied)
	}
}

func TestUpgradingTo0007GrantsTheNewTablesToTheRolesThatMayPurge(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	conn, ctx := connect(t, dsn)
	n := table.Name{Schema: "outbox", Table: "messages"}
	if err := migrations.Up(ctx, dsn, n); err != nil {
		t.Fatal(err)
	}
	m, err := migrations.Open(ctx, dsn, n)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Down(int(migrations.Latest()) - 6); err != nil { // back to before 0007
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b) // roles are cluster-wide
	dispatcher, producer := "disp_"+suffix, "prod_"+suffix
	for _, stmt := range []string{
		"CREATE ROLE " + dispatcher, "CREATE ROLE " + producer,
		"GRANT SELECT, UPDATE, DELETE ON outbox.messages TO " + dispatcher,
		"GRANT INSERT (stream, topic, payload) ON outbox.messages TO " + producer,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + dispatcher + ", " + producer, "DROP ROLE " + dispatcher + ", " + producer} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role, table, privilege string
		want                   bool
	}{
		{dispatcher, "outbox.messages_purged", "INSERT", true},
		{dispatcher, "outbox.messages_purged", "UPDATE", true},
		{dispatcher, "outbox.messages_replays", "SELECT", true},
		{dispatcher, "outbox.messages_replays", "INSERT", false},
		{producer, "outbox.messages_purged", "INSERT", false},
		{producer, "outbox.messages_replays", "SELECT", false},
	} {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3)`, c.role, c.table, c.privilege).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s has %s on %s: %v, want %v", c.role, c.privilege, c.table, got, c.want)
		}
	}
}
