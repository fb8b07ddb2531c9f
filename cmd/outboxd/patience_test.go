package main

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// freeLoopbackAddr returns a loopback address nothing listens on (a port it could listen
// on a moment ago).
//
// The port lies below Linux's default ephemeral range (32768–60999): a port the kernel
// handed out for ":0" could be handed out again, as another test's listener or as the
// local end of an outgoing connection, before this test listens on it again (seen:
// "bind: address already in use" in a full test run).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		return addr
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

// proxyTo opens a TCP proxy on addr that forwards every connection to target, until the
// test ends: the database "appears" at addr.
func proxyTo(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("open the proxy on %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
}

// withHost is dsn (a URL) pointing at addr instead.
func withHost(t *testing.T, dsn, addr string) (moved, original string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	original = u.Host
	u.Host = addr
	return u.String(), original
}

func getStatus(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestRunWaitsForTheDatabaseThenBecomesReadyAndDelivers(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	if code, _, errOut := outboxd(t, []string{"OUTBOXD_DATABASE_URL=" + dsn}, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: %s", errOut)
	}
	addr := freeLoopbackAddr(t)
	moved, pgAddr := withHost(t, dsn, addr)
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + moved,
		"OUTBOXD_DRIVERS__BUS__TYPE=discard",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus",
		"OUTBOXD_STREAMS__ORDERS__POLL_INTERVAL=50ms",
		"OUTBOXD_REPLICA_ID=patient-test",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, env{args: []string{"run"}, environ: environ, stdout: &logs, stderr: &logs}) }()

	// No database: run stays up, logs each attempt and is not ready.
	const retryLine = `"msg":"database unreachable at start; retrying"`
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(logs.String(), retryLine) < 3 {
		select {
		case code := <-done:
			t.Fatalf("run exited with %d while the database was unreachable; want it to wait\n%s", code, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 3 retry lines in 30s:\n%s", logs.String())
		}
	}
	admin := adminAddr(t, &logs)
	if code, body := getStatus(admin, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the database") {
		t.Fatalf("/readyz while waiting: %d %s; want 503 naming the wait", code, body)
	}
	if code, _ := getStatus(admin, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while waiting: %d; want 200 (alive, not ready)", code)
	}

	// The database appears: run becomes ready and delivers.
	proxyTo(t, addr, pgAddr)
	conn := testenv.Connect(t, dsn)
	if _, err := conn.Exec(context.Background(), `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'created', 'x')`); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		var delivered int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM outbox.messages WHERE status = 'delivered' AND owner = 'patient-test'`).Scan(&delivered); err != nil {
			t.Fatal(err)
		}
		code, body := getStatus(admin, "/readyz")
		if delivered == 1 && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready and delivering 60s after the database appeared: delivered %d, /readyz %d %s\n%s", delivered, code, body, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), `"msg":"database reachable"`) {
		t.Errorf("no line saying the database became reachable:\n%s", logs.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d after SIGTERM:\n%s", code, logs.String())
	}
}

func TestRunGivesUpOnAnUnreachableDatabaseAfterConnectTimeout(t *testing.T) {
	t.Parallel()
	environ := []string{
		"OUTBOXD_DATABASE_URL=postgres://postgres@" + freeLoopbackAddr(t) + "/postgres?sslmode=disable",
		"OUTBOXD_DATABASE__CONNECT_TIMEOUT=1s",
		"OUTBOXD_DRIVERS__BUS__TYPE=discard",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
	}
	start := time.Now()
	code, _, errOut := outboxd(t, environ, "run")
	took := time.Since(start)
	const want = "outboxd: the database did not answer within database.connect_timeout (1s"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("run: exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
	// One line per attempt, the wait doubling from the first.
	var waits []string
	for _, line := range strings.Split(errOut, "\n") {
		var l struct {
			Msg     string `json:"msg"`
			RetryIn string `json:"retry_in"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "database unreachable at start; retrying" {
			waits = append(waits, l.RetryIn)
		}
	}
	if len(waits) < 2 || waits[0] != "250ms" || waits[1] != "500ms" {
		t.Errorf("retry waits %v; want a line per attempt, doubling from 250ms:\n%s", waits, errOut)
	}
	if took < time.Second || took > 20*time.Second {
		t.Errorf("run gave up after %s; want about the 1s connect_timeout", took)
	}
}

func TestRunFailsAtOnceWhenTheDatabaseRefusesItsCredentials(t *testing.T) {
	t.Parallel()
	dsn, _ := withHost(t, testenv.EmptyDatabase(t), "127.0.0.1:5432")
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword("no_such_role_outboxd", "x")
	environ := []string{"OUTBOXD_DATABASE_URL=" + u.String(), "OUTBOXD_DRIVERS__BUS__TYPE=discard",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_HTTP__ADDR="}
	code, _, errOut := outboxd(t, environ, "run")
	if code != 1 || !strings.Contains(errOut, "outboxd: connect to database:") || !strings.Contains(errOut, "no_such_role_outboxd") {
		t.Fatalf("run with a role the server refuses: exit %d, stderr %q; want exit 1 at once naming the refusal", code, errOut)
	}
}
