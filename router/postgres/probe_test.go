package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/router"
)

func TestProbeFindsWhatKeepsTheInboxFromTakingMessages(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change string // SQL run on a fresh inbox; {table} is its name
		other  string // probe another table than the inbox
		says   string // "" when the inbox is fine
	}{
		{"The documented inbox is fine.", "", "", ""},
		{"An inbox with a column of the consumer's and a varchar topic is fine.",
			"ALTER TABLE {table} ADD COLUMN note text, ALTER COLUMN topic TYPE varchar(200)", "", ""},
		{"A missing table is named with the script that creates it.", "", "public.no_inbox",
			"inbox table public.no_inbox does not exist: create it with docs/sql/inbox.sql"},
		{"A missing column is named.", "ALTER TABLE {table} DROP COLUMN headers", "",
			"has the wrong shape (no column headers): compare it with docs/sql/inbox.sql"},
		{"A column of the wrong type is named.", "ALTER TABLE {table} ALTER COLUMN outbox_id TYPE text", "",
			"column outbox_id is text, want bigint"},
		{"A table without a unique index on message_id is refused.", "ALTER TABLE {table} DROP CONSTRAINT {name}_pkey", "",
			"has no primary key or unique index on message_id"},
		{"A unique index over more than message_id does not do.",
			"ALTER TABLE {table} DROP CONSTRAINT {name}_pkey; CREATE UNIQUE INDEX ON {table} (message_id, stream)", "",
			"has no primary key or unique index on message_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := newInbox(t)
			if c.change != "" {
				in.exec(t, strings.ReplaceAll(c.change, "{name}", strings.TrimPrefix(in.table, "public.")))
			}
			o := in.options()
			if c.other != "" {
				o.Table = c.other + "_" + suffix()
				c.says = strings.ReplaceAll(c.says, c.other, o.Table)
			}
			err := newDriver(t, o).Probe(testCtx(t), "")
			var missing *router.NoDestinationError
			switch {
			case c.says == "" && err != nil:
				t.Fatalf("Probe: %v", err)
			case c.says == "":
			case !errors.As(err, &missing):
				t.Fatalf("Probe: %v (%T), want a NoDestinationError", err, err)
			case !strings.Contains(err.Error(), c.says):
				t.Fatalf("Probe: %q does not say %q", err, c.says)
			}
		})
	}
}

func TestProbeOfAnAbsentServerSaysItCouldNotAsk(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	o.URL = closedPort(t)
	err := newDriver(t, o).Probe(testCtx(t), "orders")
	var missing *router.NoDestinationError
	if err == nil || errors.As(err, &missing) {
		t.Fatalf("Probe of an absent server: %v, want an error that is not a NoDestinationError", err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Probe of an absent server: %q does not say why", err)
	}
}

func TestProbeFindsAUserThatMayNotInsert(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	role := "reader_" + suffix()
	in.exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { in.exec(t, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	in.exec(t, "GRANT SELECT ON {table} TO "+role)
	o := in.options()
	cfg, err := pgx.ParseConfig(in.dsn)
	if err != nil {
		t.Fatal(err)
	}
	o.URL = fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", cfg.Host, cfg.Port, role, cfg.Database)
	d := newDriver(t, o)
	err = d.Probe(testCtx(t), "")
	if want := "does not take inserts from this database user"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Probe as a user without INSERT: %v, want %q", err, want)
	}
	for i, err := range d.Publish(testCtx(t), messages("denied", 2)) {
		if want := "may not insert into inbox table " + in.table; router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), want) {
			t.Fatalf("message %d published by a user without INSERT: %v, want permanent saying %q", i, err, want)
		}
	}
}
