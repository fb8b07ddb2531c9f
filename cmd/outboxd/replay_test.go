package main

import (
	"strings"
	"testing"
)

func TestReplayShowsItsProgressAndCanBeCancelledAndResumed(t *testing.T) {
	t.Parallel()
	w := newInspectWorld(t)
	w.insert(t, "orders", 2500, false)
	if _, err := w.pg.Pool.Exec(w.ctx, `UPDATE `+w.pg.Table.Qualified()+` SET status = 'delivered', published_at = now()`); err != nil {
		t.Fatal(err)
	}
	out, errOut := w.mustRun(t, replayCmd, "--stream", "orders", "--dry-run")
	if !strings.Contains(out, "a replay of stream orders would copy 2500 delivered messages") || errOut != "" {
		t.Fatalf("replay --dry-run: stdout %q, stderr %q", out, errOut)
	}

	// A replay started and cancelled before it copied anything copies nothing when
	// resumed.
	var id int64
	if err := w.pg.Pool.QueryRow(w.ctx, `SELECT replay_id FROM `+w.pg.Table.Derived("replay_start")+`('orders')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	out, _ = w.mustRun(t, replayCmd, "--cancel", "1")
	if !strings.Contains(out, "replay 1 of stream orders: cancelled, 0 of 2500 copied") {
		t.Fatalf("replay --cancel: %q", out)
	}
	out, _ = w.mustRun(t, replayCmd, "--resume", "1")
	if !strings.Contains(out, "replay 1 of stream orders (resumed): cancelled, 0 of 2500 copied") || w.count(t, `headers ? 'Outbox-Replay'`) != 0 {
		t.Fatalf("replay --resume of a cancelled replay: %q", out)
	}

	out, errOut = w.mustRun(t, replayCmd, "--stream", "orders")
	if !strings.Contains(errOut, "replayed 1000/2500\n") || !strings.Contains(errOut, "replayed 2500/2500\n") {
		t.Fatalf("replay off a terminal does not print a line per chunk:\n%s", errOut)
	}
	if !strings.Contains(out, "replay 2 of stream orders: done, 2500 of 2500 copied") || w.count(t, `headers ? 'Outbox-Replay'`) != 2500 {
		t.Fatalf("replay: %q", out)
	}
}
