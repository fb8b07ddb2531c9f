package config

import (
	"strings"
	"testing"
	"time"
)

const twoOutboxes = `
janitor:
  retention: 2h
database:
  keepalive_idle: 7s
drivers:
  bus:
    type: kafka
    brokers: [k1:9092]
outboxes:
  - name: orders
    database_url: postgres://db1:5432/orders
    schema: outbox
    table: messages
    streams:
      created: {driver: bus, batch_size: 50}
  - name: billing
    database_url: postgres://u:secret-pw@db2:5432/billing
    database: {keepalive_count: 5}
    janitor: {retention: 1h}
    streams:
      invoices: {driver: bus}
`

func TestOutboxesLoadEachWithItsOwnTableAndTheTopLevelDefaults(t *testing.T) {
	t.Parallel()
	cfg := mustLoad(t, twoOutboxes, "OUTBOXD_JANITOR__PURGE_BATCH=77")
	got := cfg.Served()
	if len(got) != 2 || got[0].Name != "orders" || got[1].Name != "billing" {
		t.Fatalf("served = %+v, want orders then billing", got)
	}
	orders, billing := got[0], got[1]
	if orders.Table().String() != "outbox.messages" || billing.Table().String() != "outbox.messages" {
		t.Errorf("tables = %s, %s; want outbox.messages for both (the default schema and table)", orders.Table(), billing.Table())
	}
	if s := orders.Streams["created"]; s.BatchSize != 50 || s.Concurrency != DefaultStream().Concurrency {
		t.Errorf("orders.created = %+v, want batch_size 50 and the other stream defaults", s)
	}
	// Unset keys come from the top-level sections, environment included; set ones stay.
	if orders.Janitor.Retention != 2*time.Hour || billing.Janitor.Retention != time.Hour {
		t.Errorf("retention = %s, %s; want 2h (top level) and 1h (its own)", orders.Janitor.Retention, billing.Janitor.Retention)
	}
	if orders.Janitor.PurgeBatch != 77 || billing.Janitor.PurgeBatch != 77 {
		t.Errorf("purge_batch = %d, %d; want 77 from OUTBOXD_JANITOR__PURGE_BATCH", orders.Janitor.PurgeBatch, billing.Janitor.PurgeBatch)
	}
	if billing.Database.KeepaliveIdle != 7*time.Second || billing.Database.KeepaliveCount != 5 {
		t.Errorf("billing database = %+v, want keepalive_idle 7s (top level) and keepalive_count 5", billing.Database)
	}
	one := cfg.ForOutbox(billing)
	if one.DatabaseURL != billing.DatabaseURL || len(one.Outboxes) != 0 || len(one.Streams) != 1 || len(one.Drivers) != 1 {
		t.Errorf("ForOutbox(billing) = %v, want billing's database, its one stream and driver, no outboxes", one)
	}
	if strings.Contains(string(cfg.YAML()), "secret-pw") || strings.Contains(cfg.Redacted().Outboxes[1].DatabaseURL, "secret-pw") {
		t.Errorf("an entry's database_url password shows in the redacted configuration:\n%s", cfg.YAML())
	}
	if cfg.Outboxes[1].DatabaseURL != "postgres://u:secret-pw@db2:5432/billing" {
		t.Errorf("redacting changed the configuration itself: %s", cfg.Outboxes[1].DatabaseURL)
	}
	cfg.Outboxes[1].DatabaseURL = "postgres://db2:5432/billing"
	if back := mustLoad(t, string(cfg.YAML())); len(back.Outboxes) != 2 || back.Outboxes[0].Streams["created"].BatchSize != 50 {
		t.Errorf("the YAML dump does not load back to the same outboxes:\n%s", cfg.YAML())
	}
}

func TestATopLevelConfigurationIsTheDefaultOutbox(t *testing.T) {
	t.Parallel()
	c := validConfig()
	got := c.Served()
	if len(got) != 1 || got[0].Name != DefaultOutbox || got[0].DatabaseURL != c.DatabaseURL || len(got[0].Streams) != 1 {
		t.Errorf("served = %+v, want the one outbox %q of the top-level keys", got, DefaultOutbox)
	}
}

func TestOutboxesProblemsAreReportedAtOnceUnderTheirEntry(t *testing.T) {
	t.Parallel()
	ps := loadProblems(t, `
database_url: postgres://db0/app
drivers:
  bus: {type: kafka, brokers: [k1:9092]}
streams:
  legacy: {driver: bus}
outboxes:
  - name: orders
    database_url: postgres://db1:5432/orders
    streams:
      created: {driver: nope}
  - name: Orders!
    database_url: postgres://db1:5432/orders
    janitor: {purge_batch: 0}
    streams:
      invoices: {driver: bus}
  - name: orders
    streams:
      paid: {driver: bus, batch_size: 0}
`, "OUTBOXD_OUTBOXES__0__NAME=x")
	wantKeys(t, ps, "database_url", "streams", "OUTBOXD_OUTBOXES__0__NAME",
		"outboxes[0].streams.created.driver",
		"outboxes[1].name", "outboxes[1].table", "outboxes[1].janitor.purge_batch",
		"outboxes[2].name", "outboxes[2].database_url", "outboxes[2].streams.paid.batch_size")
	msg := ps.Error()
	for _, want := range []string{
		`streams: set together with outboxes`,
		`database_url: set together with outboxes (line 2)`,
		`outboxes[1].table: "outbox.messages" of this database is also served by outboxes[0]`,
		`outboxes[2].name: "orders" is also the name of outboxes[0]`,
		`OUTBOXD_OUTBOXES__0__NAME: outboxes is set in the configuration file only`,
		`outboxes[0].streams.created.driver: no driver named "nope" is configured under drivers (line 11)`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems do not mention %q:\n%s", want, msg)
		}
	}
}

func TestEveryOutboxNeedsAStreamToRun(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Streams = nil
	c.Outboxes = []Outbox{defaultOutbox(), defaultOutbox()}
	c.Outboxes[0].Streams = map[string]Stream{"orders": c.Served()[0].Streams["orders"]}
	err := c.RequireStreams()
	if err == nil || !strings.Contains(err.Error(), "outboxes[1].streams: no streams configured") {
		t.Errorf("RequireStreams = %v, want outboxes[1].streams named", err)
	}
}

func TestAnOutboxBehindATransactionPoolerNeedsItsOwnListenURL(t *testing.T) {
	t.Parallel()
	ps := loadProblems(t, `
drivers:
  bus: {type: kafka, brokers: [k1:9092]}
outboxes:
  - name: orders
    database_url: postgres://pooler:6432/orders
    database: {pooler: transaction, listen_url: "postgres://db1:5432/orders"}
    streams:
      created: {driver: bus}
  - name: billing
    database_url: postgres://pooler:6432/billing
    database: {pooler: transaction}
    streams:
      invoiced: {driver: bus}
  - name: audit
    database_url: postgres://db3:5432/audit
    database: {pooler: sometimes}
    streams:
      logged: {driver: bus}
`)
	wantKeys(t, ps, "outboxes[1].database.listen_url", "outboxes[2].database.pooler")
	if msg := ps.Error(); !strings.Contains(msg, "outboxes[1].database.listen_url: required when outboxes[1].database.pooler is transaction") {
		t.Errorf("problems do not say billing needs a listen URL:\n%s", msg)
	}
}
