//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// execSibling replaces this process with the program at path: argv and the environment
// pass unchanged, and so do the terminal, signals and the exit status. It returns only
// when the exec fails.
func execSibling(path string, argv []string, e env) error {
	err := syscall.Exec(path, argv, e.environ)
	return fmt.Errorf("exec %s: %w", path, err)
}
