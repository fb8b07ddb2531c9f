package testenv

import (
	"testing"
	"time"
)

// ReportCPUPerMessage reports b's cpu-µs/msg: this process's CPU time since since (a
// ProcessCPU reading) over msgs messages. It reports nothing where ProcessCPU is not
// known.
func ReportCPUPerMessage(b *testing.B, since time.Duration, msgs int64) {
	if since < 0 || msgs == 0 {
		return
	}
	b.ReportMetric(float64((ProcessCPU()-since).Microseconds())/float64(msgs), "cpu-µs/msg")
}
