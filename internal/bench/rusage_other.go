//go:build !unix

package bench

import "os"

// processUsage is not measured on this platform.
func processUsage(*os.ProcessState) (cpuSeconds, peakRSSMiB float64) { return 0, 0 }

// SelfPeakRSSMiB is not measured on this platform: 0.
func SelfPeakRSSMiB() float64 { return 0 }

// selfCPUSeconds is not measured on this platform: 0.
func selfCPUSeconds() float64 { return 0 }

// terminate kills the process: there is no SIGTERM here.
func terminate(p *os.Process) error { return p.Kill() }
