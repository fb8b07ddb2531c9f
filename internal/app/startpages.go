package app

import (
	"context"
	"log/slog"
	"time"
)

// A process's resident set counts every page of its executable it has touched, and the
// kernel maps the pages around each one it faults in (fault-around, 64 KiB). A Go start
// touches much of the binary once: some 230 init functions, the tables they build, the
// first pass of each loop. A while after every outbox dispatches, outboxd lets go of its
// mappings of those pages (releaseStartPages): the pages stay in the page cache, and
// what the running dispatcher executes comes back on its next touch, a minor fault.
// Idle, the resident set halves at first and settles a fifth below where it was
// (docs/benchmarks.md, Memory); nothing the process computes changes, and no page it
// wrote is dropped.

// startSettle is how long after the last outbox's "dispatching" the start's pages are
// released: the pipelines' first claims, the listener and the first samples have run by
// then, and what they touched once goes too. A start that meets a backlog releases them
// as soon as the first poll says so as well, so that the drain's memory grows beside the
// pages it runs on, not beside the whole start's. A start that meets none does not: the
// first requests after it (a readiness probe) would fault back in what had just been let
// go, which delayed the first /readyz by 2 ms here (docs/benchmarks.md, exec → ready).
const startSettle = 2 * time.Second

// releaseStartPagesAfter releases the start's pages of the executable when backlog
// closes (a first poll met messages to deliver), and after d, unless ctx ends first, and
// logs how many KiB were resident each time (debug level; a failure costs only the
// resident set, so it is logged at the same level).
func releaseStartPagesAfter(ctx context.Context, d time.Duration, backlog <-chan struct{}, log *slog.Logger) {
	release := func() {
		start := time.Now()
		kib, err := releaseStartPages()
		log.Debug("released the start's pages of the executable", "kib", kib, "took", time.Since(start), "err", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-backlog:
			release()
			backlog = nil
		case <-t.C:
			release()
			return
		}
	}
}
