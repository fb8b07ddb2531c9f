// Package cli holds what outboxd's two commands, outboxd and outboxd-bench, mean alike
// on a command line: a mistake in it is a UsageError, which each command reports in one
// line with a hint and exit status 2, whatever verb or option parser found it.
//
// Invariant: a UsageError is only ever a mistake of the caller's words on the command
// line, never a failure of the work a verb does; a verb's failure exits 1.
package cli

import "errors"

// UsageError is a mistake on the command line. Verb names the verb whose help the hint
// points to; the command fills it in when the verb left it empty.
type UsageError struct {
	Msg  string
	Verb string
}

func (e UsageError) Error() string { return e.Msg }

// AsUsage turns a mistake in a verb's options, an error of type E (an option package's
// own error type), into a UsageError; any other error is returned as it is.
func AsUsage[E interface {
	~string
	error
}](err error) error {
	var oe E
	if errors.As(err, &oe) {
		return UsageError{Msg: oe.Error()}
	}
	return err
}
