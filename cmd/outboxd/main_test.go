package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
)

func TestMain(m *testing.M) { testenv.Main(runThenClean{m}) }

// runThenClean removes what tests of this package built once for all of them.
type runThenClean struct{ m *testing.M }

func (r runThenClean) Run() int {
	code := r.m.Run()
	for _, dir := range []string{migrateCLIDir, binaries.dir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	return code
}

// outboxd runs one command in-process and returns its exit status and output.
func outboxd(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), env{args: args, environ: environ, stdout: &out, stderr: &errOut})
	return code, out.String(), errOut.String()
}

func TestMigrateUpVersionDownThroughTheCommandLine(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t), "OUTBOXD_SCHEMA=billing", "OUTBOXD_TABLE=events"}
	// Versions need not be contiguous: "down 1" from the latest lands on the one before it.
	versions, err := migrations.Versions()
	if err != nil || len(versions) < 2 {
		t.Fatalf("migration versions %v, %v: this test needs at least two", versions, err)
	}
	latest, previous := versions[len(versions)-1], versions[len(versions)-2]
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "version"}, "billing.events: schema version 0 of"},
		{[]string{"migrate", "up"}, fmt.Sprintf("billing.events: schema version %d of %d (clean)", latest, latest)},
		{[]string{"migrate", "up"}, fmt.Sprintf("schema version %d of %d (clean)", latest, latest)},
		{[]string{"migrate", "down", "1"}, fmt.Sprintf("schema version %d of %d (clean)", previous, latest)},
		{[]string{"migrate", "down", "--all"}, "schema version 0 of"},
		{[]string{"migrate", "up"}, fmt.Sprintf("schema version %d of", latest)},
	}
	for _, s := range steps {
		code, out, errOut := outboxd(t, environ, s.args...)
		if code != 0 || !strings.Contains(out, s.want) {
			t.Fatalf("outboxd %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(s.args, " "), code, out, errOut, s.want)
		}
	}
}

func TestMigrateRefusesMistakesWithAClearMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		environ []string
		args    []string
		code    int
		want    string
	}{
		{"an injected table name is refused before connecting", []string{"OUTBOXD_TABLE=x; drop table y"}, []string{"migrate", "up"}, 1, "table"},
		{"down without a step count is refused", nil, []string{"migrate", "down"}, 2, "number of steps or --all"},
		{"down with a negative step count is refused", nil, []string{"migrate", "down", "-3"}, 2, "flag provided but not defined"},
		{"an unknown subcommand is refused", nil, []string{"migrate", "sideways"}, 2, `unknown subcommand "sideways"`},
		{"an unreachable database is named", []string{"OUTBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, []string{"migrate", "up"}, 1, "connect to database"},
		{"an unknown command is refused", nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := outboxd(t, c.environ, c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, errOut, c.code, c.want)
			}
		})
	}
}

func TestMigrateSQLPrintsTheScriptForTheConfiguredNames(t *testing.T) {
	t.Parallel()
	code, out, errOut := outboxd(t, []string{"OUTBOXD_SCHEMA=billing", "OUTBOXD_TABLE=events"}, "migrate", "sql", "up")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The script must be what psql needs for these names: apply it and use the table.
	pg := testenv.EmptyDatabase(t)
	code, _, errOut = outboxd(t, []string{"OUTBOXD_DATABASE_URL=" + pg}, "migrate", "version") // proves the database answers
	if code != 0 {
		t.Fatalf("version: %s", errOut)
	}
	conn := testenv.Connect(t, pg)
	if _, err := conn.Exec(context.Background(), out); err != nil {
		t.Fatalf("apply printed script: %v", err)
	}
	if _, err := conn.Exec(context.Background(), `INSERT INTO billing.events (stream, topic, payload) VALUES ('s', 't', 'x')`); err != nil {
		t.Fatalf("the printed script did not create billing.events: %v", err)
	}
}

func TestConfigCheckNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	secrets := []string{"pg-pass-7f3a", "sasl-pass-91c2", "nats-token-55d0", "admin-token-0123456789abcdef"}
	file := filepath.Join(t.TempDir(), "outboxd.yaml")
	yaml := `
database_url: postgres://app:pg-pass-7f3a@db.internal:5432/shop
drivers:
  bus:
    type: kafka
    brokers: [kafka-1:9092]
    sasl: {mechanism: plain, username: outboxd, password: sasl-pass-91c2}
  js:
    type: jetstream
    url: nats://127.0.0.1:4222
    token: nats-token-55d0
streams:
  orders: {driver: bus}
  shipments: {driver: js}
http:
  admin_token: admin-token-0123456789abcdef
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := outboxd(t, nil, "config", "check", "--config", file)
	if code != 0 {
		t.Fatalf("config check: exit %d: %s", code, errOut)
	}
	for _, s := range secrets {
		if strings.Contains(out+errOut, s) {
			t.Fatalf("config check printed secret %q:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "db.internal") || !strings.Contains(out, "kafka-1:9092") {
		t.Fatalf("config check hid non-secret settings:\n%s", out)
	}

	// The same file with mistakes: every mistake reported, still no secret.
	bad := strings.Replace(yaml, "orders: {driver: bus}", "orders: {driver: bsu, batch_size: 0}", 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = outboxd(t, nil, "config", "check", "--config", file)
	if code != 1 || !strings.Contains(errOut, "streams.orders.driver") || !strings.Contains(errOut, "streams.orders.batch_size") {
		t.Fatalf("config check with two mistakes: exit %d, stderr %q", code, errOut)
	}
	for _, s := range secrets {
		if strings.Contains(out+errOut, s) {
			t.Fatalf("config check printed secret %q in its problems:\n%s", s, errOut)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	if code, out, _ := outboxd(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "outboxd ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, out, _ := outboxd(t, nil, "help"); code != 0 || !strings.Contains(out, "migrate up") {
		t.Fatalf("help: %d %q", code, out)
	}
	if code, _, errOut := outboxd(t, nil); code != 2 || !strings.Contains(errOut, "no command given") {
		t.Fatalf("no command: %d %q", code, errOut)
	}
}
