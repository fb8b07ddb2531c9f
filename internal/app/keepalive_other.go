//go:build !linux

package app

import (
	"syscall"
	"time"
)

// userTimeout does nothing where TCP_USER_TIMEOUT is not available; keepalive still
// applies.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
