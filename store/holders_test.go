package store_test

import (
	"testing"
)

// TestTheLockHoldersAreTheSessionsHoldingTheJanitorAndFlowLocks: nobody holds a lock
// at first; the janitor lock and a stream's flow lock then show with their session's
// pid, and another table's janitor lock does not.
func TestTheLockHoldersAreTheSessionsHoldingTheJanitorAndFlowLocks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := setup(t)
	if h, err := f.store.LockHolders(f.ctx, []string{"orders"}); err != nil || len(h) != 0 {
		t.Fatalf("before any lock: %+v, %v; want none", h, err)
	}
	oj, err := other.store.TryLock(other.ctx)
	if err != nil || oj == nil {
		t.Fatalf("another table's janitor lock: %v", err)
	}
	defer oj.Release(other.ctx)
	j, err := f.store.TryLock(f.ctx)
	if err != nil || j == nil {
		t.Fatalf("janitor lock: %v", err)
	}
	defer j.Release(f.ctx)
	fl, err := f.store.TryFlow(f.ctx, "orders")
	if err != nil || fl == nil {
		t.Fatalf("flow lock: %v", err)
	}
	defer fl.Release(f.ctx)
	h, err := f.store.LockHolders(f.ctx, []string{"orders", "payments"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Lock != "janitor" || h[1].Lock != "flow" || h[1].Stream != "orders" ||
		h[0].PID == 0 || h[0].BackendStart.IsZero() {
		t.Fatalf("holders: %+v; want the janitor lock, then the flow lock of orders, with their sessions", h)
	}
}
