package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// idleSettle is how long an idle dispatcher runs after its "dispatching" line before
// its resident set is read: its start's garbage collected, its pools and timers settled,
// and, since outboxd releases its start's pages of the executable two seconds after
// "dispatching" (internal/app/startpages.go), past that release by as much again plus a
// second, so that what the idle loops touch has come back.
const idleSettle = 5 * time.Second

// idleRSS starts the dispatcher binary with driver's configuration on an empty table,
// reads its resident set idleSettle after "dispatching" (/proc/<pid>/status: VmRSS,
// and its split into RssAnon, what the process allocated, and RssFile, pages of its
// binary and libraries), stops it, and records them on d, with its exec → dispatching
// and exec → /readyz 200: a start that no backlog competes with. Where there is no
// /proc the resident figures stay 0. Just before, it times the floor programs' starts
// with the same environment (floorStarts).
func (b *bench) idleRSS(ctx context.Context, driver, binary string, d *benchDrain) error {
	if err := b.empty(ctx); err != nil {
		return err
	}
	cfg, err := b.dispatcherConfig(driver)
	if err != nil {
		return err
	}
	environ := benchEnviron(b.o.Environ, cfg)
	if err := b.floorStarts(ctx, environ); err != nil {
		return fmt.Errorf("the floor before it: %w", err)
	}
	child, err := startDispatcher(ctx, binary, environ)
	if err != nil {
		return err
	}
	defer child.kill()
	if err := awaitStart(ctx, child, child.dispatching, "dispatching"); err != nil {
		return err
	}
	select {
	case <-time.After(idleSettle):
	case <-child.exited:
		return child.failure("exited while idle")
	case <-ctx.Done():
		return ctx.Err()
	}
	status := procStatus(child.cmd.Process.Pid)
	if err := child.stop(); err != nil {
		return err
	}
	d.ReadyDispatchingMs, d.ReadyzMs = child.readiness()
	mib := func(key string) float64 { return round(float64(status[key])/1024, 1) }
	d.DispatcherIdleRSSMiB, d.DispatcherIdleAnonMiB, d.DispatcherIdleFileMiB = mib("VmRSS"), mib("RssAnon"), mib("RssFile")
	return nil
}

// procStatus reads the kB figures of /proc/<pid>/status, by name; empty where there is
// no such file.
func procStatus(pid int) map[string]int64 {
	out := map[string]int64{}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	for line := range strings.Lines(string(data)) {
		name, rest, ok := strings.Cut(line, ":")
		value, isKB := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		if !ok || !isKB {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
			out[name] = n
		}
	}
	return out
}
