//go:build unix

package bench

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
	return cpu.Seconds(), maxRSSMiB(ru) // on Linux, see readPeakRSS
}

// SelfPeakRSSMiB is this process's peak resident set so far: everything it holds,
// brokers embedded in it included.
func SelfPeakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return maxRSSMiB(&ru)
}

// selfCPUSeconds is this process's CPU time (user + system) so far: the bench's own
// goroutines and every broker embedded in it.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func maxRSSMiB(ru *syscall.Rusage) float64 {
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return float64(ru.Maxrss) / (1 << 20) // bytes there
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux and the BSDs
}

// terminate asks a process to stop the way an operator would: SIGTERM.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
