//go:build unix

package main

import (
	"os"
	"runtime"
	"syscall"
	"time"
)

// processUsage is the CPU time (user + system) and peak resident set of a process that
// has been waited for.
func processUsage(ps *os.ProcessState) (cpuSeconds, peakRSSMiB float64) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rss := float64(ru.Maxrss) / 1024 // KiB on Linux and the BSDs (see readPeakRSS for Linux)
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		rss = float64(ru.Maxrss) / (1 << 20) // bytes there
	}
	return cpu.Seconds(), rss
}

// terminate asks a process to stop the way an operator would: SIGTERM.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
