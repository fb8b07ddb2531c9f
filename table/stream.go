package table

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxStreamLen bounds stream (and driver) names.
const MaxStreamLen = 63

var streamPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// CheckStream reports why s cannot name a stream, or nil. Stream names become metric
// labels, log fields and segments of environment variable names (where "__" separates
// segments), so configuration refuses every other name; the producer client applies
// the same rule, so that no row is written into a stream no configuration could serve.
// Driver names follow the same rule.
func CheckStream(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case len(s) > MaxStreamLen:
		return fmt.Errorf("%q is %d bytes long; at most %d are allowed", short(s), len(s), MaxStreamLen)
	case !streamPattern.MatchString(s):
		return fmt.Errorf("%q must be lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", short(s))
	case strings.Contains(s, "__"):
		return fmt.Errorf("%q holds \"__\", which separates segments of environment variable names", short(s))
	}
	return nil
}

// short keeps a refused name readable in an error message.
func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
