package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// readyz is the status of one GET /readyz.
func readyz(t *testing.T, addr string) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTheFloorLogsAsRunDoesAnswersReadyzFromItsConnectionAndStopsCleanly runs the
// built program as the bench does: it must log the admin address and "dispatching",
// answer /readyz 200 while its one session lives and 503 once the server has ended it,
// and exit 0 on SIGTERM (the bench counts any other exit as a failed start).
func TestTheFloorLogsAsRunDoesAnswersReadyzFromItsConnectionAndStopsCleanly(t *testing.T) {
	t.Parallel()
	bin := testenv.GoBuild(t, ".", filepath.Join(t.TempDir(), "outboxd-floor"))
	dsn := testenv.EmptyDatabase(t)
	cmd := exec.Command(bin, "run")
	cmd.Env = append(os.Environ(), "OUTBOXD_DATABASE_URL="+dsn, "OUTBOXD_HTTP__ADDR=127.0.0.1:0")
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var addr string
	sc := bufio.NewScanner(logs)
	for want := 0; want < 2 && sc.Scan(); want++ {
		var rec struct{ Msg, Addr string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		switch {
		case want == 0 && rec.Msg == adminListening && rec.Addr != "":
			addr = rec.Addr
		case want == 1 && rec.Msg == dispatching:
		default:
			t.Fatalf("log line %d is %q; want %q with addr, then %q", want+1, sc.Text(), adminListening, dispatching)
		}
	}
	if addr == "" {
		t.Fatalf("no log lines before the log ended: %v", sc.Err())
	}
	if code := readyz(t, addr); code != http.StatusOK {
		t.Fatalf("/readyz answered %d with its session open, want 200", code)
	}

	admin := testenv.Connect(t, dsn)
	if _, err := admin.Exec(t.Context(),
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"); err != nil {
		t.Fatal(err)
	}
	if code := readyz(t, addr); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d after its session was ended, want 503", code)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after SIGTERM")
	}
}

// TestTheLinkedFloorLinksEveryPackageOutboxdLinks holds the linked build (-tags linked)
// to its promise: the packages it links are outboxd's, its own main in place of
// outboxd's, so that its start pays every init outboxd's start pays. A package outboxd
// comes to import and linked.go leaves out fails it.
func TestTheLinkedFloorLinksEveryPackageOutboxdLinks(t *testing.T) {
	t.Parallel()
	deps := func(args ...string) map[string]bool {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-deps"}, args...)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v (needs the go tool on PATH): %v", args, err)
		}
		set := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			set[p] = true
		}
		return set
	}
	outboxd, linked := deps("../outboxd"), deps("-tags", "linked", ".")
	for p := range outboxd {
		if !linked[p] && p != "github.com/outboxd/outboxd/cmd/outboxd" {
			t.Errorf("outboxd links %s and the linked floor does not: import it in linked.go", p)
		}
	}
	for p := range linked {
		if !outboxd[p] && p != "github.com/outboxd/outboxd/cmd/outboxd-floor" {
			t.Errorf("the linked floor links %s, which outboxd does not", p)
		}
	}
}
