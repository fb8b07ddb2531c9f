package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
)

// A session that ends takes its CPU time out of the live processes; the server's total
// must keep it (through the postmaster's reaped children), or a drain during which
// sessions end reads less CPU than it used, even a negative figure.
func TestTheServersCPUKeepsTheTimeOfSessionsThatEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.EmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	postmaster, local := postmasterOf(backend)
	if !local {
		_ = conn.Close(ctx)
		t.Skip("the test server is not a local process: its CPU is not read from /proc")
	}
	// Spend a second or so of the session's CPU, then end the session.
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 20000000)"); err != nil {
		t.Fatal(err)
	}
	_, spent, _ := procStat(backend)
	reapedBefore := reapedCPU(postmaster)
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(backend)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's process did not end within 10s")
		}
	}
	// The session's time must have moved into the reaped children's, which serverCPU
	// adds. The reaped total only grows, so other tests' sessions on a shared server
	// cannot hide a loss here (the whole server's sum, compared before and after, moved
	// with them both ways: once 0.45 s down in CI).
	const tick = 0.02 // the session's figure and the reaped one are each in 10 ms ticks
	if grew := reapedCPU(postmaster) - reapedBefore; grew < spent-tick {
		t.Fatalf("the postmaster's reaped children's CPU grew %.2f s when a session that had used %.2f s ended", grew, spent)
	}
	if serverCPU(postmaster) < reapedBefore+spent-tick {
		t.Fatalf("serverCPU leaves out the ended session's time")
	}
}
