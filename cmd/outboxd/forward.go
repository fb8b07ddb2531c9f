package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// bench and demo live in outboxd-bench, with the embedded brokers they start, so that
// this binary links none of them. Their verbs here exec the outboxd-bench in this
// executable's directory, never one found on PATH, which could be another version.

// siblingVerbs are the verbs outboxd-bench answers for outboxd, help included.
var siblingVerbs = map[string]bool{"bench": true, "demo": true}

// siblingName is outboxd-bench's file name.
func siblingName() string {
	if runtime.GOOS == "windows" {
		return "outboxd-bench.exe"
	}
	return "outboxd-bench"
}

// forwardCmd is a verb that replaces this process with `outboxd-bench <verb> <args…>`
// (execSibling), so signals, the terminal and the exit status are outboxd-bench's.
func forwardCmd(verb string) func(context.Context, env) error {
	return func(_ context.Context, e env) error {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("%s: find this executable, beside which %s is: %w", verb, siblingName(), err)
		}
		path, err := siblingPath(self, verb)
		if err != nil {
			return err
		}
		return execSibling(path, append([]string{path, verb}, e.args...), e)
	}
}

// siblingPath is outboxd-bench in the directory of self, symbolic links resolved; when
// it is not there, the error names the path looked at and how to build it.
func siblingPath(self, verb string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	path := filepath.Join(filepath.Dir(self), siblingName())
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s runs %s, which is not beside this executable (looked for %s): "+
			"make build builds both, or: go build -o %s ./cmd/outboxd-bench", verb, siblingName(), path, path)
	}
	return path, nil
}
