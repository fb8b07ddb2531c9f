package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

var (
	migrateCLIOnce sync.Once
	migrateCLIPath string
	migrateCLIErr  error
	migrateCLIOut  []byte
	// migrateCLIDir holds the built CLI; TestMain removes it after every test ran.
	migrateCLIDir string
)

// migrateCLI builds golang-migrate's own CLI, with the pgx5 driver, from the module version
// go.mod pins: the tool the README tells operators to use.
func migrateCLI(t *testing.T) string {
	t.Helper()
	migrateCLIOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outboxd-migrate-cli-")
		if err == nil {
			migrateCLIDir = dir
			migrateCLIPath = filepath.Join(dir, "migrate")
			cmd := exec.Command("go", "build", "-tags", "pgx5", "-o", migrateCLIPath, "github.com/golang-migrate/migrate/v4/cmd/migrate")
			migrateCLIOut, err = cmd.CombinedOutput()
		}
		migrateCLIErr = err
	})
	if migrateCLIErr != nil {
		t.Fatalf("build the migrate CLI: %v\n%s", migrateCLIErr, migrateCLIOut)
	}
	return migrateCLIPath
}

// runMigrateCLI runs the migrate CLI on the repository's migration files against dsn (a
// postgres:// URL, given to the CLI as pgx5://) with the extra URL options.
func runMigrateCLI(t *testing.T, dsn, options string, args ...string) (string, error) {
	t.Helper()
	url := "pgx5://" + strings.TrimPrefix(dsn, "postgres://")
	if options != "" {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + options
	}
	cmd := exec.Command(migrateCLI(t), append([]string{"-path", filepath.Join("..", "..", "migrations"), "-database", url}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestTheMigrateCLIWithTheDocumentedOptionsRecordsTheVersionOutboxdReads(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	environ := []string{"OUTBOXD_DATABASE_URL=" + dsn}
	n := table.Name{Schema: "outbox", Table: "messages"}
	// As documented: the CLI creates its version table but not the schema it lives in.
	if _, err := testenv.Connect(t, dsn).Exec(context.Background(), "CREATE SCHEMA IF NOT EXISTS outbox"); err != nil {
		t.Fatal(err)
	}
	if out, err := runMigrateCLI(t, dsn, migrations.CLIOptions(n), "up"); err != nil {
		t.Fatalf("migrate CLI up with the documented options: %v\n%s", err, out)
	}
	latest := migrations.Latest()
	want := fmt.Sprintf("outbox.messages: schema version %d of %d (clean)\n", latest, latest)
	if code, out, errOut := outboxd(t, environ, "migrate", "version"); code != 0 || out != want {
		t.Fatalf("outboxd migrate version: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if code, out, errOut := outboxd(t, environ, "migrate", "up"); code != 0 || !strings.Contains(out, "no migration pending") {
		t.Fatalf("outboxd migrate up after the CLI: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := outboxd(t, environ, "stats"); code != 0 {
		t.Fatalf("outboxd stats on the CLI-migrated schema: exit %d, stderr %q", code, errOut)
	}
	// run starts on it and becomes ready.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	done := make(chan int, 1)
	runEnv := append(environ, "OUTBOXD_DRIVERS__BUS__TYPE=discard", "OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_HTTP__ADDR=127.0.0.1:0")
	go func() { done <- run(ctx, env{args: []string{"run"}, environ: runEnv, stdout: &logs, stderr: &logs}) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("run on the CLI-migrated schema exited %d:\n%s", code, logs.String())
		default:
		}
		if strings.Contains(logs.String(), `"msg":"dispatching"`) {
			if code, body := getStatus(adminAddr(t, &logs), "/readyz"); code == 200 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("/readyz on the CLI-migrated schema: %d %s", code, body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run did not start on the CLI-migrated schema:\n%s", logs.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d:\n%s", code, logs.String())
	}
}

func TestASchemaMigratedWithTheCLIsDefaultVersionTableIsExplainedWithTheFix(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	environ := []string{"OUTBOXD_DATABASE_URL=" + dsn}
	n := table.Name{Schema: "outbox", Table: "messages"}
	if out, err := runMigrateCLI(t, dsn, "", "up"); err != nil {
		t.Fatalf("migrate CLI up with its defaults: %v\n%s", err, out)
	}
	latest := migrations.Latest()
	fix := fmt.Sprintf("%s' force %d", migrations.CLIOptions(n), latest)
	runEnv := append(environ, "OUTBOXD_DRIVERS__BUS__TYPE=discard", "OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_HTTP__ADDR=")
	for _, args := range [][]string{{"migrate", "version"}, {"migrate", "status"}, {"migrate", "up"}, {"stats"}, {"run"}, {"run", "--migrate"}} {
		code, _, errOut := outboxd(t, runEnv, args...)
		if code != 1 || !strings.Contains(errOut, "the migrate CLI's default version table") || !strings.Contains(errOut, fix) {
			t.Fatalf("outboxd %s: exit %d, stderr %q; want exit 1 naming the default version table and the fix %q",
				strings.Join(args, " "), code, errOut, fix)
		}
	}
	// The sentence's command fixes it, and nothing was applied twice meanwhile.
	if out, err := runMigrateCLI(t, dsn, migrations.CLIOptions(n), "force", fmt.Sprint(latest)); err != nil {
		t.Fatalf("the force command outboxd named: %v\n%s", err, out)
	}
	want := fmt.Sprintf("outbox.messages: no migration pending\noutbox.messages: schema version %d of %d (clean)\n", latest, latest)
	if code, out, errOut := outboxd(t, environ, "migrate", "up"); code != 0 || out != want {
		t.Fatalf("outboxd migrate up after the fix: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
}
