//go:build !unix

package testenv

import "time"

// ProcessCPU is unknown here.
func ProcessCPU() time.Duration { return -1 }
