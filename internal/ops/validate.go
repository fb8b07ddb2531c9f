package ops

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ParseTime reads an RFC 3339 time (2024-05-01T12:00:00Z) or a duration before now
// (90m, 2h, 36h); "" is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time such as 2024-05-01T12:00:00Z "+
		"nor a positive duration before now such as 90m or 2h", s)
}

// textProblem says why s cannot be a stream name, or "": PostgreSQL text holds neither
// NUL nor invalid UTF-8, and passing either on would turn a client's mistake into a
// database error.
func textProblem(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character, which no stream name holds"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// checkIDs refuses a list of ids that is empty, longer than one batch, or names a
// number that is no message id; more says how to ask for more than a batch.
func checkIDs(ids []int64, most int, more string) error {
	if len(ids) == 0 || len(ids) > most {
		return invalid("ids: want 1 to %d ids, got %d%s", most, len(ids), more)
	}
	for _, id := range ids {
		if id < 1 {
			return invalid("ids: %d is not a message id (ids are positive)", id)
		}
	}
	return nil
}

// problems joins every problem found in one request into one refusal, or is nil.
func problems(found []string) error {
	if len(found) == 0 {
		return nil
	}
	return invalid("%s", strings.Join(found, "; "))
}
