//go:build !unix

package jetstream_test

import "time"

// processCPU is unknown here.
func processCPU() time.Duration { return -1 }
