//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is this process's CPU time so far (user + system), -1 where it is not
// known: benchmarks report it per message (cpu-µs/msg).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
