//go:build linux

package chaos_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// Harness variables. They start OUTBOXD_TEST_ so that outboxd's configuration never
// mistakes them for its own.
const (
	// envForm selects the form: "ci" (default) or "full" (make chaos).
	envForm = "OUTBOXD_TEST_CHAOS"
	// envBinary names an outboxd binary to run instead of building one.
	envBinary = "OUTBOXD_TEST_CHAOS_BINARY"
	// envReport names a file the results table is written to as well.
	envReport = "OUTBOXD_TEST_CHAOS_REPORT"
	// envSoak is the soak's duration (a Go duration); without it the soak does not run.
	envSoak = "OUTBOXD_TEST_SOAK"
)

// form is how hard the suite pushes: the CI form runs in the normal test run, the full
// form (make chaos) is what docs/chaos.md reports.
type form struct {
	name     string
	messages int           // committed per scenario, at least
	outage   time.Duration // how long a service stays down, cut or refusing
	// Stream settings every replica runs with.
	leaseTTL, publishTimeout, pollInterval time.Duration
	backoffInitial, backoffMax             time.Duration
	janitorInterval                        time.Duration
	txSize                                 int // messages per producer transaction
	producers                              int
	parallel                               bool          // scenarios run side by side
	drainTimeout                           time.Duration // from the end of production to every message confirmed
}

var (
	ciForm = form{
		name: "ci", messages: 3000, outage: 4 * time.Second,
		leaseTTL: 4 * time.Second, publishTimeout: 2 * time.Second, pollInterval: 250 * time.Millisecond,
		backoffInitial: 100 * time.Millisecond, backoffMax: time.Second, janitorInterval: 500 * time.Millisecond,
		txSize: 20, producers: 3, parallel: true, drainTimeout: 3 * time.Minute,
	}
	fullForm = form{
		name: "full", messages: 100_000, outage: 30 * time.Second,
		leaseTTL: 10 * time.Second, publishTimeout: 5 * time.Second, pollInterval: 500 * time.Millisecond,
		backoffInitial: 200 * time.Millisecond, backoffMax: 5 * time.Second, janitorInterval: time.Second,
		txSize: 50, producers: 4, parallel: false, drainTimeout: 10 * time.Minute,
	}
)

func currentForm() (form, error) {
	switch v := os.Getenv(envForm); v {
	case "", "ci":
		return ciForm, nil
	case "full":
		return fullForm, nil
	default:
		return form{}, fmt.Errorf("%s=%q: want ci or full", envForm, v)
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The CI form's scenarios mostly wait (outages, leases): three at a time use a
	// 2-core machine better than the default GOMAXPROCS, unless -parallel was given.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "3")
	}
	testenv.Main(suiteRunner{m})
}

// suiteRunner runs the tests, then closes what the suite shared (testenv.Main then
// drops the shared database the reproductions use, and exits).
type suiteRunner struct{ m *testing.M }

func (r suiteRunner) Run() int {
	code := r.m.Run()
	suite.close()
	return code
}

// suite holds what the tests of one process share: the outboxd binary and the private
// PostgreSQL server the scenarios that do not restart one create their databases on.
var suite suiteState

type suiteState struct {
	binOnce sync.Once
	binDir  string
	bin     string
	binErr  error

	pgOnce sync.Once
	pg     *testenv.PrivatePostgres
	pgErr  error

	mu      sync.Mutex
	private []*testenv.PrivatePostgres // servers of single scenarios, closed at exit
}

func (s *suiteState) close() {
	if s.pg != nil {
		_ = s.pg.Close()
	}
	s.mu.Lock()
	for _, p := range s.private {
		_ = p.Close()
	}
	s.mu.Unlock()
	if s.binDir != "" {
		_ = os.RemoveAll(s.binDir)
	}
}

// outboxdBinary builds cmd/outboxd once per test process (no -race: the replicas are
// the system under test, the race detector watches the harness) or returns
// $OUTBOXD_TEST_CHAOS_BINARY.
func outboxdBinary(t testing.TB) string {
	t.Helper()
	suite.binOnce.Do(func() {
		if bin := os.Getenv(envBinary); bin != "" {
			suite.bin, suite.binErr = filepath.Abs(bin)
			return
		}
		root, err := moduleRoot()
		if err != nil {
			suite.binErr = err
			return
		}
		if suite.binDir, err = os.MkdirTemp("", "outboxd-chaos-bin."); err != nil {
			suite.binErr = err
			return
		}
		suite.bin = filepath.Join(suite.binDir, "outboxd")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		// Without symbols the link is faster, and go caches the result.
		cmd := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", suite.bin, "./cmd/outboxd")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			suite.binErr = fmt.Errorf("go build ./cmd/outboxd: %w\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "chaos: built outboxd in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if suite.binErr != nil {
		t.Fatalf("chaos: outboxd binary: %v", suite.binErr)
	}
	return suite.bin
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the outboxd module")
	}
	return filepath.Dir(mod), nil
}

// suitePostgres starts the suite's private server once and reports why it could not.
func suitePostgres() error {
	suite.pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		suite.pg, suite.pgErr = testenv.StartPrivatePostgres(ctx)
	})
	return suite.pgErr
}

// database is an outbox database of one scenario.
type database struct {
	dsn    string                   // direct, for producers and the harness
	server *testenv.PrivatePostgres // nil on the shared server
	addr   string                   // host:port the proxy forwards to
}

// scenarioDatabase creates a database for one scenario: on a private server of its own
// when the scenario restarts PostgreSQL, else on the suite's private server, else (no
// private server possible here) on the shared test server.
func scenarioDatabase(t *testing.T, name string, ownServer bool) database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var server *testenv.PrivatePostgres
	if ownServer {
		pg, err := testenv.StartPrivatePostgres(ctx)
		if errors.Is(err, testenv.ErrNoPrivatePostgres) {
			// Not a skip: a scenario that checked nothing must not pass for one that ran.
			// scripts/test.sh and scripts/chaos.sh install what is missing when run as root.
			t.Fatalf("chaos: %s restarts PostgreSQL, must not restart the shared server, and no private one can start here: %v\n"+
				"install the server binaries (sudo apt-get install -y --no-install-recommends postgresql, or run scripts/test.sh as root) or set OUTBOXD_PG_BINDIR", name, err)
		}
		if err != nil {
			t.Fatalf("chaos: private PostgreSQL: %v", err)
		}
		suite.mu.Lock()
		suite.private = append(suite.private, pg)
		suite.mu.Unlock()
		t.Cleanup(func() { _ = pg.Close() })
		server = pg
	} else {
		err := suitePostgres()
		switch {
		case err == nil:
			server = suite.pg
		case errors.Is(err, testenv.ErrNoPrivatePostgres):
			t.Logf("no private PostgreSQL (%v): using the shared test server", err)
			dsn := testenv.EmptyDatabase(t)
			return database{dsn: dsn, addr: hostPort(t, dsn)}
		default:
			t.Fatalf("chaos: private PostgreSQL: %v", err)
		}
	}
	dsn, err := server.CreateDatabase(ctx, "chaos_"+name+"_"+fmt.Sprint(time.Now().UnixNano()%1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	return database{dsn: dsn, server: server, addr: server.Addr()}
}
