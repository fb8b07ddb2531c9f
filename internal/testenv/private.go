//go:build unix

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPrivatePostgres is wrapped by StartPrivatePostgres when this machine cannot run a
// server of a test's own at all (no server binaries, no user to run them as), as opposed
// to a server that was started and misbehaved.
var ErrNoPrivatePostgres = errors.New("no private PostgreSQL server can be started here")

// PrivatePostgres is a throwaway PostgreSQL server of one test process: its own data
// directory and port, so a test may stop, restart or crash it without disturbing the
// shared server that other packages' tests use at the same time.
//
// As root, its files belong to the postgres OS user and initdb and pg_ctl run as that
// user (initdb refuses root). Its directory lives under $OUTBOXD_PG_TMPDIR or /var/tmp,
// never under t.TempDir(), which the postgres user cannot enter when tests run as root.
// A directory left behind by a test process that died is removed, and its server
// stopped, by the next StartPrivatePostgres.
type PrivatePostgres struct {
	bindir string
	base   string // the directory this server owns
	data   string
	port   int
	runas  []string // runuser -u postgres -- when root
	uid    int
	gid    int
}

// privatePrefix names the directories of private servers, so leftovers can be found.
const privatePrefix = "outboxd-pgpriv."

// StartPrivatePostgres initialises and starts a server on a free loopback port and
// checks that the server answering there is this one (SHOW data_directory).
func StartPrivatePostgres(ctx context.Context) (*PrivatePostgres, error) {
	bindir, err := serverBinaries()
	if err != nil {
		return nil, err
	}
	p := &PrivatePostgres{bindir: bindir, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root needs the postgres OS user to run initdb (install the postgresql package, or run scripts/ensure-postgres.sh once): %w", ErrNoPrivatePostgres, err)
		}
		p.uid, _ = strconv.Atoi(u.Uid)
		p.gid, _ = strconv.Atoi(u.Gid)
		p.runas = []string{"runuser", "-u", "postgres", "--"}
	}
	parent := os.Getenv("OUTBOXD_PG_TMPDIR")
	if parent == "" {
		parent = "/var/tmp"
	}
	if parent, err = filepath.EvalSymlinks(parent); err != nil {
		return nil, fmt.Errorf("%w: OUTBOXD_PG_TMPDIR: %w", ErrNoPrivatePostgres, err)
	}
	reapPrivate(parent, bindir)
	if p.base, err = os.MkdirTemp(parent, privatePrefix); err != nil {
		return nil, fmt.Errorf("%w: cannot create a directory under %s (set OUTBOXD_PG_TMPDIR): %w", ErrNoPrivatePostgres, parent, err)
	}
	p.data = filepath.Join(p.base, "data")
	fail := func(err error) (*PrivatePostgres, error) {
		_ = p.Close()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.base, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(err)
	}
	if p.uid >= 0 {
		if err := os.Chown(p.base, p.uid, p.gid); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(p.base, 0o700); err != nil {
		return fail(err)
	}
	if out, err := p.run(ctx, "initdb", "--no-sync", "--no-instructions", "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "-D", p.data); err != nil {
		return fail(fmt.Errorf("private PostgreSQL: initdb: %w: %s", err, out))
	}
	conf := fmt.Sprintf(`
# A private server of outboxd's tests (internal/testenv/private.go); the port is given to pg_ctl.
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 300
# A test may crash the server, never the machine: fsync guards only against the latter.
fsync = off
`, p.base)
	f, err := os.OpenFile(filepath.Join(p.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	for attempt := 0; ; attempt++ {
		if p.port, err = freePort(); err != nil {
			return fail(err)
		}
		err = p.Start(ctx)
		if err == nil {
			return p, nil
		}
		if attempt == 4 || !strings.Contains(p.LogTail(20), "could not") {
			return fail(err)
		}
		// The port was taken between probing and binding: try another.
	}
}

// serverBinaries finds initdb, pg_ctl and postgres: $OUTBOXD_PG_BINDIR, the highest
// /usr/lib/postgresql/*/bin, then initdb on PATH.
func serverBinaries() (string, error) {
	var dirs []string
	if d := os.Getenv("OUTBOXD_PG_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versioned, func(i, j int) bool { return pgVersion(versioned[i]) > pgVersion(versioned[j]) })
	dirs = append(dirs, versioned...)
	if path, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(path))
	}
	for _, d := range dirs {
		ok := true
		for _, tool := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(d, tool)); err != nil || st.Mode()&0o111 == 0 {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: no directory holds initdb, pg_ctl and postgres (install the postgresql package or set OUTBOXD_PG_BINDIR)", ErrNoPrivatePostgres)
}

func pgVersion(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// reapPrivate stops and removes the private servers of test processes that died.
func reapPrivate(parent, bindir string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, privatePrefix+"*"))
	for _, base := range dirs {
		raw, err := os.ReadFile(filepath.Join(base, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // its owner lives (or we cannot tell)
		}
		left := &PrivatePostgres{bindir: bindir, base: base, data: filepath.Join(base, "data")}
		if os.Geteuid() == 0 {
			left.runas = []string{"runuser", "-u", "postgres", "--"}
		}
		_ = left.Close()
	}
}

// run runs one of the server's tools as the server's owner and returns its output.
func (p *PrivatePostgres) run(ctx context.Context, tool string, args ...string) (string, error) {
	argv := append(append(append([]string{}, p.runas...), filepath.Join(p.bindir, tool)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.base
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Addr is the server's address, 127.0.0.1:port; it stays the same across restarts.
func (p *PrivatePostgres) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// DataDir is the server's data directory.
func (p *PrivatePostgres) DataDir() string { return p.data }

// DSN is the URL of database on this server, as the superuser postgres (trust).
func (p *PrivatePostgres) DSN(database string) string {
	return "postgres://postgres@" + p.Addr() + "/" + database + "?sslmode=disable"
}

// AdminDSN is the URL of the postgres database, for creating others.
func (p *PrivatePostgres) AdminDSN() string { return p.DSN("postgres") }

// CreateDatabase creates a database and returns its DSN.
func (p *PrivatePostgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, p.AdminDSN())
	if err != nil {
		return "", fmt.Errorf("private PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("private PostgreSQL: create database %s: %w", name, err)
	}
	return p.DSN(name), nil
}

// Start starts the server (again) on its port and waits until it answers as itself.
func (p *PrivatePostgres) Start(ctx context.Context) error {
	logFile := filepath.Join(p.base, "server.log")
	if out, err := p.run(ctx, "pg_ctl", "-D", p.data, "-l", logFile, "-o", "-p "+strconv.Itoa(p.port),
		"-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("private PostgreSQL on port %d: pg_ctl start: %w: %s\n%s", p.port, err, out, p.LogTail(10))
	}
	// pg_ctl may report success for a server that is not ours: check who answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		dir, err := p.dataDirectory(ctx)
		if err == nil && dir == p.data {
			return nil
		}
		if err == nil {
			return fmt.Errorf("private PostgreSQL: the server on port %d serves %s, not %s", p.port, dir, p.data)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("private PostgreSQL on port %d does not answer: %w\n%s", p.port, err, p.LogTail(10))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *PrivatePostgres) dataDirectory(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, p.AdminDSN())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	err = conn.QueryRow(cctx, "SHOW data_directory").Scan(&dir)
	return dir, err
}

// ShutdownMode is pg_ctl's stop mode.
type ShutdownMode string

// Shutdown modes: fast disconnects every session and shuts down cleanly; immediate
// quits at once, as a crash would, and the next start recovers from the WAL.
const (
	ShutdownFast      ShutdownMode = "fast"
	ShutdownImmediate ShutdownMode = "immediate"
)

// Stop stops the server and waits until it is gone.
func (p *PrivatePostgres) Stop(ctx context.Context, mode ShutdownMode) error {
	if out, err := p.run(ctx, "pg_ctl", "-D", p.data, "-m", string(mode), "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("private PostgreSQL on port %d: pg_ctl stop -m %s: %w: %s", p.port, mode, err, out)
	}
	return nil
}

// LogTail returns the last n lines of the server's log, for diagnostics.
func (p *PrivatePostgres) LogTail(n int) string {
	raw, err := os.ReadFile(filepath.Join(p.base, "server.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Close stops the server at once and removes its directory. It is safe to call twice.
func (p *PrivatePostgres) Close() error {
	if p.base == "" {
		return nil
	}
	var err error
	if _, statErr := os.Stat(filepath.Join(p.data, "postmaster.pid")); statErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = p.Stop(ctx, ShutdownImmediate)
		cancel()
	}
	if rmErr := os.RemoveAll(p.base); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	p.base = ""
	return err
}
