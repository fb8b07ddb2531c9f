package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
)

// TestTheInspectionVerbsServeEveryOutboxAndWriteToTheOneNamed points stats, requeue
// and messages at a configuration of two outbox tables that both have stream orders,
// and a third whose database does not exist.
func TestTheInspectionVerbsServeEveryOutboxAndWriteToTheOneNamed(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	other := testenv.NewPG(t)
	w.insert(t, "orders", 3, true)
	file := filepath.Join(t.TempDir(), "outboxd.yaml")
	yaml := fmt.Sprintf(`drivers: {bus: {type: discard}}
outboxes:
  - {name: shop, database_url: %q, schema: %s, streams: {orders: {driver: bus}}}
  - {name: billing, database_url: %q, schema: %s, streams: {orders: {driver: bus}, invoices: {driver: bus}}}
  - {name: gone, database_url: %q, streams: {orders: {driver: bus}}}
`, w.pg.DSN, w.pg.Table.Schema, other.DSN, other.Table.Schema, strings.Replace(other.DSN, "outboxd_test_", "outboxd_none_", 1))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	w.environ = []string{"OUTBOXD_CONFIG=" + file}

	out, _, err := w.run(t, statsCmd, "--json")
	var all ops.AllStats
	if jerr := json.Unmarshal([]byte(out), &all); jerr != nil || len(all.Outboxes) != 3 {
		t.Fatalf("stats --json = %s (%v), want three outboxes", out, jerr)
	}
	if all.Outboxes[0].Outbox != "shop" || all.Outboxes[0].Streams[0].Failed != 3 || all.Outboxes[1].Streams[0].Failed != 0 {
		t.Errorf("stats: shop and billing = %+v, %+v; want shop's 3 failed apart from billing's none", all.Outboxes[0], all.Outboxes[1])
	}
	if all.Outboxes[2].Error == "" || err == nil {
		t.Errorf("stats with one database missing: entry %+v, err %v; want its entry to say why and the verb to fail", all.Outboxes[2], err)
	}
	var cout, cerr bytes.Buffer
	code := run(w.ctx, env{args: []string{"config", "check", "--connect"}, environ: w.environ, stdout: &cout, stderr: &cerr})
	if code == 0 || !strings.Contains(cerr.String(), "outbox gone: database") || strings.Contains(cerr.String(), "outbox shop") {
		t.Errorf("config check --connect: exit %d, stderr %q; want a problem for outbox gone only", code, cerr.String())
	}
	out, _ = w.mustRun(t, statsCmd, "--outbox", "billing")
	if !strings.Contains(out, "invoices") {
		t.Errorf("stats --outbox billing = %q, want billing's streams", out)
	}

	_, _, err = w.run(t, requeueCmd, "--stream", "orders", "--all")
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), `stream "orders" is configured in several outboxes (shop, billing, gone)`) {
		t.Errorf("requeue --stream orders without --outbox: %v; want a usage error naming the outboxes", err)
	}
	out, _ = w.mustRun(t, requeueCmd, "--stream", "orders", "--all", "--outbox", "shop", "--json")
	if !strings.Contains(out, `"requeued": 3`) {
		t.Errorf("requeue --outbox shop = %s, want 3 requeued", out)
	}
	if out, _ := w.mustRun(t, messagesCmd, "--stream", "invoices"); !strings.Contains(out, "no messages") && strings.Contains(out, "orders") {
		t.Errorf("messages --stream invoices (only billing has it) = %q", out)
	}
}

// TestMigrateActsOnEveryOutboxAndRevertsOnlyTheOneNamed migrates two outbox tables of
// a configuration at once; reverting needs --outbox.
func TestMigrateActsOnEveryOutboxAndRevertsOnlyTheOneNamed(t *testing.T) {
	t.Parallel()
	dsn := testenv.SharedDatabase(t)
	w := &inspectWorld{ctx: t.Context()}
	suffix := strings.ToLower(strings.ReplaceAll(t.Name(), "Test", ""))[:12]
	a, b := "ma_"+suffix, "mb_"+suffix
	file := filepath.Join(t.TempDir(), "outboxd.yaml")
	yaml := fmt.Sprintf(`drivers: {bus: {type: discard}}
outboxes:
  - {name: a, database_url: %q, schema: %s, streams: {orders: {driver: bus}}}
  - {name: b, database_url: %q, schema: %s, streams: {orders: {driver: bus}}}
`, dsn, a, dsn, b)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	w.environ = []string{"OUTBOXD_CONFIG=" + file}
	t.Cleanup(func() {
		conn := testenv.Connect(t, dsn)
		_, _ = conn.Exec(w.ctx, "DROP SCHEMA IF EXISTS "+a+" CASCADE; DROP SCHEMA IF EXISTS "+b+" CASCADE")
	})
	out, _ := w.mustRun(t, migrateCmd, "up")
	if !strings.Contains(out, "outbox a:") || !strings.Contains(out, "outbox b:") || !strings.Contains(out, a+".messages") || !strings.Contains(out, b+".messages") {
		t.Errorf("migrate up = %q, want both outboxes' tables migrated, each named", out)
	}
	_, _, err := w.run(t, migrateCmd, "down", "1")
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "name one with --outbox") {
		t.Errorf("migrate down 1 with two outboxes: %v; want a usage error asking for --outbox", err)
	}
	out, _ = w.mustRun(t, migrateCmd, "down", "--outbox", "b", "1")
	if strings.Contains(out, a+".messages") {
		t.Errorf("migrate down --outbox b touched outbox a: %q", out)
	}
}
