//go:build !unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// execSibling runs the program at path where a process cannot replace itself: with
// this process's standard streams and environment, exiting with its exit status. It
// returns only when the program cannot be started.
func execSibling(path string, argv []string, e env) error {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = e.environ, os.Stdin, e.stdout, e.stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		return fmt.Errorf("run %s: %w", path, err)
	}
	os.Exit(0)
	return nil
}
