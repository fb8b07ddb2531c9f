package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxd/outboxd/internal/cli"
)

// bench and demo live in outboxd-bench, with the embedded brokers they start, so that
// this binary links none of them. Their verbs here exec the outboxd-bench in this
// executable's directory, never one found on PATH, which could be another version.

// siblingVerbs are the verbs outboxd-bench answers for outboxd, help included.
var siblingVerbs = map[string]bool{"bench": true, "demo": true}

// sibling is outboxd-bench's name, found beside this executable (cli.Beside).
const sibling = "outboxd-bench"

// forwardCmd is a verb that replaces this process with `outboxd-bench <verb> <args…>`
// (execSibling), so signals, the terminal and the exit status are outboxd-bench's.
func forwardCmd(verb string) func(context.Context, env) error {
	return func(_ context.Context, e env) error {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("%s: find this executable, beside which %s is: %w", verb, sibling, err)
		}
		path, err := siblingPath(self, verb)
		if err != nil {
			return err
		}
		return execSibling(path, append([]string{path, verb}, e.args...), e)
	}
}

// siblingPath is outboxd-bench in the directory of self (cli.Beside); when it is not
// there, the error names the path looked at and how to build it.
func siblingPath(self, verb string) (string, error) {
	path, err := cli.Beside(self, sibling)
	if err != nil {
		return "", fmt.Errorf("%s runs %s, which is not beside this executable (looked for %s): "+
			"make build builds both, or: go build -o %s ./cmd/outboxd-bench", verb, filepath.Base(path), path, path)
	}
	return path, nil
}
