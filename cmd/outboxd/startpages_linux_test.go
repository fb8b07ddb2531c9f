package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// startLog is what run's debug log says of its start's pages: when it began to
// dispatch, and when it released the pages and how many KiB it found resident each
// time, with any error.
type startLog struct {
	dispatching time.Time
	at          []time.Time
	kib         []int64
	errs        []string
}

func readStartLog(logs string) startLog {
	var out startLog
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			KiB  int64     `json:"kib"`
			Err  string    `json:"err"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch l.Msg {
		case "dispatching":
			out.dispatching = l.Time
		case "released the start's pages of the executable":
			out.at = append(out.at, l.Time)
			out.kib = append(out.kib, l.KiB)
			if l.Err != "" {
				out.errs = append(out.errs, l.Err)
			}
		}
	}
	return out
}

// TestRunLetsGoOfItsStartsPagesAndDeliversAfter runs `outboxd run` (in this test
// process, whose executable is the test binary) and waits for its releases of the
// start's pages of the executable: once the start has settled, and at "dispatching" too
// when the start meets messages to deliver (an idle start keeps them until it settles,
// so that the first requests do not fault back what was just let go). Then a row
// committed after them is delivered: the code the dispatcher runs comes back.
func TestRunLetsGoOfItsStartsPagesAndDeliversAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		backlog bool
	}{
		{"an idle start lets go of its pages once it has settled, not at dispatching", false},
		{"a start that meets a message lets go of its pages at dispatching and once settled", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			releasesAfterStart(t, tc.backlog)
		})
	}
}

func releasesAfterStart(t *testing.T, backlog bool) {
	dsn := testenv.EmptyDatabase(t)
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + dsn,
		"OUTBOXD_DRIVERS__NOWHERE__TYPE=discard",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=nowhere",
		"OUTBOXD_REPLICA_ID=pages-test",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
		"OUTBOXD_LOG__LEVEL=debug",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := testenv.Connect(t, dsn)
	want := 1
	if backlog {
		var out testenv.SyncBuffer
		if code := run(ctx, env{args: []string{"migrate", "up"}, environ: environ, stdout: &out, stderr: &out}); code != 0 {
			t.Fatalf("migrate up exited %d\n%s", code, out.String())
		}
		if _, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'early', 'x')`); err != nil {
			t.Fatal(err)
		}
		want = 2
	}
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env{args: []string{"run", "--migrate"}, environ: environ, stdout: &stderr, stderr: &stderr})
	}()
	deadline := time.Now().Add(30 * time.Second)
	var l startLog
	for {
		l = readStartLog(stderr.String())
		if len(l.errs) > 0 {
			t.Fatalf("a release failed: %v\n%s", l.errs, stderr.String())
		}
		if len(l.at) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("saw %d of the start's %d releases in 30s\n%s", len(l.at), want, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l.kib[0] <= 0 {
		t.Fatalf("the first release found %d KiB of the executable resident; want some", l.kib[0])
	}
	first := l.at[0].Sub(l.dispatching)
	if backlog && first > time.Second {
		t.Fatalf("a start that met a message first released its pages %v after dispatching; want at once", first)
	}
	if !backlog && first < time.Second {
		t.Fatalf("an idle start released its pages %v after dispatching; want once it settled", first)
	}
	t.Logf("released %v KiB, %v after dispatching", l.kib, first.Round(time.Millisecond))
	if _, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'created', 'x')`); err != nil {
		t.Fatal(err)
	}
	rows := 1
	if backlog {
		rows = 2
	}
	awaitDelivered(t, conn, "pages-test", rows, time.Now().Add(30*time.Second), &stderr)
	if got := len(readStartLog(stderr.String()).at); got != want {
		t.Fatalf("%d releases of the start's pages; want %d", got, want)
	}
	cancel()
	awaitExit(t, done, &stderr)
}
