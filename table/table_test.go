package table_test

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/table"
)

func TestCheckIdentAcceptsPlainNamesOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		ident string
		ok    bool
	}{
		{"a plain lower-case name is accepted", "my_outbox", true},
		{"a leading underscore is accepted", "_outbox2", true},
		{"a name of the maximum length is accepted", strings.Repeat("a", table.MaxNameLen), true},
		{"an injection attempt is refused", "x; drop table y", false},
		{"upper case is refused", "Messages", false},
		{"a quote is refused", `"q"`, false},
		{"a dot is refused", "outbox.messages", false},
		{"a leading digit is refused", "1outbox", false},
		{"an empty name is refused", "", false},
		{"a name one byte too long is refused", strings.Repeat("a", table.MaxNameLen+1), false},
		{"the pg_ prefix is refused", "pg_outbox", false},
		{"non-ASCII letters are refused", "ausgänge", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := table.CheckIdent(c.ident); (err == nil) != c.ok {
				t.Fatalf("CheckIdent(%q) = %v, want ok=%v", c.ident, err, c.ok)
			}
		})
	}
}

func TestDerivedNamesAreQuotedAndDistinctPerTable(t *testing.T) {
	t.Parallel()
	a := table.Name{Schema: "shop", Table: "order"}
	if got := a.Qualified(); got != `"shop"."order"` {
		t.Fatalf("Qualified = %s", got)
	}
	if got := a.Derived("requeue"); got != `"shop"."order_requeue"` {
		t.Fatalf("Derived = %s", got)
	}
	b := table.Name{Schema: "shop", Table: "billing"}
	if a.Channel() == b.Channel() || a.MigrationsTable() == b.MigrationsTable() || a.AdvisoryLockKey() == b.AdvisoryLockKey() {
		t.Fatal("two tables in one schema share a derived name")
	}
}

// FuzzCheckIdent: whatever CheckIdent accepts is safe to splice into SQL quoted: no
// quote, no NUL, nothing outside the pattern, and short enough for derived names.
func FuzzCheckIdent(f *testing.F) {
	for _, s := range []string{"messages", "x; drop table y", `a"b`, "", "pg_x", strings.Repeat("z", 80), "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if table.CheckIdent(s) != nil {
			return
		}
		if len(s) > table.MaxNameLen || len(s)+len("_schema_migrations") > 63 {
			t.Fatalf("accepted %q, too long for derived names", s)
		}
		for _, r := range s {
			if r != '_' && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
				t.Fatalf("accepted %q containing %q", s, r)
			}
		}
	})
}
