//go:build unix

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PgBouncer is a PgBouncer of one test's own in transaction-pooling mode, in front of the
// test server (AdminDSN's host and port): what most PostgreSQL users put between their
// applications and the database. Through it, two transactions of one client may run on
// two server sessions, and a session's state (LISTEN, advisory locks, prepared
// statements) outlives the transaction only on the server, not for the client.
type PgBouncer struct {
	port int
	cmd  *exec.Cmd
	log  *SyncBuffer
}

// pgbouncerBinary is where Debian's package installs it; PATH is searched otherwise.
const pgbouncerBinary = "/usr/sbin/pgbouncer"

// pgbouncerPrefix names the directories of the tests' PgBouncers, so leftovers can be found.
const pgbouncerPrefix = "outboxd-pgbouncer."

// NewPgBouncer starts a PgBouncer for t on a free loopback port, pool_mode=transaction,
// with at most poolSize server connections per database and user, trusting every user
// the server trusts; it stops when t ends. Without a pgbouncer binary t skips, saying
// how to install one, or fails under OUTBOXD_REQUIRE_SERVICES=1 (scripts/test.sh
// installs it where apt-get can).
func NewPgBouncer(t testing.TB, poolSize int) *PgBouncer {
	t.Helper()
	bin := pgbouncerBinary
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			msg := "pgbouncer is not installed (" + err.Error() + "); apt-get install pgbouncer, or run scripts/test.sh, which installs it"
			if os.Getenv("OUTBOXD_REQUIRE_SERVICES") == "1" {
				t.Fatal(msg + "; OUTBOXD_REQUIRE_SERVICES=1 makes this a failure")
			}
			t.Skip(msg)
		}
	}
	server, err := url.Parse(AdminDSN())
	if err != nil || server.Host == "" {
		t.Fatalf("testenv: PgBouncer needs %s as a postgres:// URL with a host, got %s", EnvDatabaseURL, redactDSN(AdminDSN()))
	}
	host, port := server.Hostname(), server.Port()
	if port == "" {
		port = "5432"
	}
	user := server.User.Username()
	if user == "" {
		user = "postgres"
	}
	reapPgBouncers()
	// Not t.TempDir(): when tests run as root, pgbouncer refuses root and runs as the
	// postgres user, who cannot enter a test's temporary directory.
	dir, err := os.MkdirTemp("", pgbouncerPrefix)
	if err != nil {
		t.Fatalf("testenv: PgBouncer directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testenv: PgBouncer directory: %v", err)
	}
	auth := filepath.Join(dir, "users.txt")
	users := fmt.Sprintf("%q \"\"\n", user)
	if user != "postgres" {
		users += "\"postgres\" \"\"\n"
	}
	if err := os.WriteFile(auth, []byte(users), 0o644); err != nil {
		t.Fatalf("testenv: PgBouncer auth file: %v", err)
	}
	var argv []string
	if os.Geteuid() == 0 {
		argv = append(argv, "-u", "postgres")
	}
	for attempt := 0; ; attempt++ {
		b := &PgBouncer{log: &SyncBuffer{}}
		if b.port, err = freePort(); err != nil {
			t.Fatalf("testenv: PgBouncer port: %v", err)
		}
		ini := filepath.Join(dir, "pgbouncer.ini")
		conf := strings.Join([]string{
			"[databases]",
			fmt.Sprintf("* = host=%s port=%s", host, port),
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			"listen_port = " + strconv.Itoa(b.port),
			"unix_socket_dir =",
			"auth_type = trust",
			"auth_file = " + auth,
			"pool_mode = transaction",
			"default_pool_size = " + strconv.Itoa(poolSize),
			"max_client_conn = 500",
			"",
		}, "\n")
		if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
			t.Fatalf("testenv: PgBouncer configuration: %v", err)
		}
		b.cmd = exec.Command(bin, append(append([]string{}, argv...), ini)...)
		b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
		if err := b.cmd.Start(); err != nil {
			t.Fatalf("testenv: start %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(exited) }()
		// Who started it, and its pid, for reapPgBouncers should this process die first.
		owner := fmt.Sprintf("%d %d\n", os.Getpid(), b.cmd.Process.Pid)
		if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(owner), 0o600); err != nil {
			t.Errorf("testenv: PgBouncer owner file: %v", err)
		}
		if b.ready(exited) {
			t.Cleanup(func() {
				_ = b.cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					_ = b.cmd.Process.Kill()
					<-exited
				}
			})
			return b
		}
		_ = b.cmd.Process.Kill()
		<-exited
		if attempt == 3 || !strings.Contains(b.log.String(), "bind") {
			t.Fatalf("testenv: PgBouncer did not start:\n%s", b.log.String())
		}
		// The port was taken between probing and binding: try another.
	}
}

// ready waits up to ten seconds for the listening port, false if pgbouncer exits first.
func (b *PgBouncer) ready(exited <-chan struct{}) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", b.Addr())
		if err == nil {
			_ = c.Close()
			return true
		}
		select {
		case <-exited:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Addr is the host:port PgBouncer listens on.
func (b *PgBouncer) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

// DSN is dsn, a postgres:// URL of the test server, rewritten to go through PgBouncer.
func (b *PgBouncer) DSN(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("testenv: PgBouncer DSN: want a postgres:// URL, got %s", redactDSN(dsn))
	}
	u.Host = b.Addr()
	return u.String()
}

// Log is what PgBouncer has logged so far.
func (b *PgBouncer) Log() string { return b.log.String() }

// reapPgBouncers stops the PgBouncers of test processes that died before their cleanup
// (a test binary's timeout panics past it) and removes their directories.
func reapPgBouncers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pgbouncerPrefix+"*"))
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // starting, or not ours
		}
		var owner, pid int
		if _, err := fmt.Sscan(string(raw), &owner, &pid); err != nil || owner <= 0 || pid <= 0 ||
			!errors.Is(syscall.Kill(owner, 0), syscall.ESRCH) {
			continue // its owner lives (or we cannot tell)
		}
		// Only the pgbouncer that reads this directory's configuration, not a process
		// that reused its pid.
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil &&
			strings.Contains(string(cmdline), dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = os.RemoveAll(dir)
	}
}
