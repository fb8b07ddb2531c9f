package app

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestTheConnectionsRunOpensEarlyAreClosedWhenItStopsBeforeUsingThem: run begins to
// open the start's connections before it sets up the admin listener (startTry), so a
// run that fails there, its address taken, must close what that attempt opens instead
// of leaving two server sessions behind for the life of the process.
func TestTheConnectionsRunOpensEarlyAreClosedWhenItStopsBeforeUsingThem(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	app := "outboxd-starttry-" + pg.Table.Schema
	cfg := startConfig(t, pg, withAppName(t, pg.DSN, app))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer taken.Close()
	cfg.HTTP.Addr = taken.Addr().String()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, RunOptions{Version: "test", Log: io.Discard}); err == nil {
		t.Fatal("run served on an address that was taken")
	}
	sessions := func() int {
		var n int
		must(t, pg.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
		return n
	}
	time.Sleep(time.Second) // the attempt has long finished its handshakes
	for deadline := time.Now().Add(5 * time.Second); sessions() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of the failed run still open 6s after it returned; want 0", sessions())
		}
	}
}
