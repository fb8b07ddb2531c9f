package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// releases reads run's debug log for its releases of the start's pages: the KiB each
// found resident, and any error.
func releases(logs string) (kib []int64, errs []string) {
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Msg string `json:"msg"`
			KiB int64  `json:"kib"`
			Err string `json:"err"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "released the start's pages of the executable" {
			kib = append(kib, l.KiB)
			if l.Err != "" {
				errs = append(errs, l.Err)
			}
		}
	}
	return kib, errs
}

// TestRunLetsGoOfItsStartsPagesAndDeliversAfter runs `outboxd run` (in this test
// process, whose executable is the test binary) and waits for both releases of the
// start's pages of the executable, at "dispatching" and once the start has settled;
// then a row committed after them is delivered: the code the dispatcher runs comes back.
func TestRunLetsGoOfItsStartsPagesAndDeliversAfter(t *testing.T) {
	t.Parallel()
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
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env{args: []string{"run", "--migrate"}, environ: environ, stdout: &stderr, stderr: &stderr})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		kib, errs := releases(stderr.String())
		if len(errs) > 0 {
			t.Fatalf("a release failed: %v\n%s", errs, stderr.String())
		}
		if len(kib) == 2 {
			if kib[0] <= 0 {
				t.Fatalf("the release at dispatching found %d KiB of the executable resident; want some", kib[0])
			}
			t.Logf("released %d KiB at dispatching, %d KiB once settled", kib[0], kib[1])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("saw %d of the start's two releases in 30s\n%s", len(kib), stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn := testenv.Connect(t, dsn)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'created', 'x')`); err != nil {
		t.Fatal(err)
	}
	awaitDelivered(t, conn, "pages-test", deadline, &stderr)
	cancel()
	awaitExit(t, done, &stderr)
}
