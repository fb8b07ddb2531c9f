package postgres

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/table"
)

const configDocs = "../../docs/configuration.md"

// consumerSQL is the consumer's loop docs/configuration.md shows under ### postgres: its
// one sql block, split into statements.
func consumerSQL(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(configDocs)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### postgres\n")
	if !ok {
		t.Fatalf("%s has no ### postgres section", configDocs)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 1 {
		t.Fatalf("%s's postgres section has %d sql blocks, want 1", configDocs, len(blocks))
	}
	var stmts []string
	for stmt := range strings.SplitSeq(blocks[0][1], ";\n") {
		var lines []string
		for line := range strings.Lines(stmt) {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				lines = append(lines, line)
			}
		}
		if s := strings.TrimSpace(strings.Join(lines, "")); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}

// TestTheDocumentedInboxTakesMessagesAndTheDocumentedConsumerReadsThem runs
// docs/sql/inbox.sql as it stands in a database of its own, publishes into the table it
// creates with the driver's default options, and reads the messages with the consumer's
// loop from docs/configuration.md, twice: the second round finds nothing left to do.
func TestTheDocumentedInboxTakesMessagesAndTheDocumentedConsumerReadsThem(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(script) != inboxDDL {
		t.Fatalf("%s differs from the driver's inbox.sql (InboxSQL): keep them the same", scriptPath)
	}
	conn := testenv.Connect(t, dsn)
	if _, err := conn.Exec(testCtx(t), string(script)); err != nil {
		t.Fatalf("run %s: %v", scriptPath, err)
	}

	o := DefaultOptions()
	o.URL = dsn
	d := newDriver(t, o)
	if err := d.Probe(testCtx(t), ""); err != nil {
		t.Fatalf("Probe of the documented inbox: %v", err)
	}
	msgs := messages("shop.orders", 5)
	requireNoErrors(t, d.Publish(testCtx(t), msgs))

	stmts := consumerSQL(t)
	for round, want := range [][]string{{"0", "1", "2", "3", "4"}, nil} {
		var ids, seqs []string
		for _, stmt := range stmts {
			switch {
			case strings.HasPrefix(stmt, "SELECT"):
				rows, err := conn.Query(testCtx(t), stmt)
				if err != nil {
					t.Fatalf("round %d: %s: %v", round, stmt, err)
				}
				for rows.Next() {
					var seq int64
					var id, topic string
					var key, payload []byte
					var headers map[string]string
					if err := rows.Scan(&seq, &id, &topic, &key, &headers, &payload); err != nil {
						t.Fatalf("round %d: scan: %v", round, err)
					}
					ids, seqs = append(ids, id), append(seqs, headers["seq"])
				}
				if err := rows.Err(); err != nil {
					t.Fatalf("round %d: %s: %v", round, stmt, err)
				}
			case strings.Contains(stmt, "$1"):
				if _, err := conn.Exec(testCtx(t), stmt, ids); err != nil {
					t.Fatalf("round %d: %s: %v", round, stmt, err)
				}
			default:
				if _, err := conn.Exec(testCtx(t), stmt); err != nil {
					t.Fatalf("round %d: %s: %v", round, stmt, err)
				}
			}
		}
		if !slices.Equal(seqs, want) {
			t.Fatalf("round %d: the consumer's loop read messages %v, want %v", round, seqs, want)
		}
	}
}

func TestInboxSQLNamesTheTableAndItsIndexAfterTheTableItIsGiven(t *testing.T) {
	t.Parallel()
	got := InboxSQL(table.Name{Schema: "billing", Table: "order_inbox"})
	for _, want := range []string{`CREATE TABLE "billing"."order_inbox" (`,
		`CREATE INDEX "order_inbox_unprocessed_idx" ON "billing"."order_inbox" (seq)`} {
		if !strings.Contains(got, want) {
			t.Fatalf("InboxSQL lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "outboxd_inbox") {
		t.Fatalf("InboxSQL still names the default table:\n%s", got)
	}
}
