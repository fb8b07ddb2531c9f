package driveropt

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/pgdsn"
)

// Problem is one thing wrong with a set of options. Key is the dotted path of the
// setting inside the driver's section ("provision.stream"); the configuration prefixes
// it with the driver's own path.
type Problem struct {
	Key string
	Msg string
}

func (p Problem) Error() string { return p.Key + ": " + p.Msg }

// Checker collects problems; its checks word them as outboxd's configuration does.
// The zero value is ready to use.
type Checker struct {
	Problems []Problem
}

// Add records a problem with key.
func (c *Checker) Add(key, format string, args ...any) {
	c.Problems = append(c.Problems, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Nest records ps as problems of the section at prefix.
func (c *Checker) Nest(prefix string, ps []Problem) {
	for _, p := range ps {
		c.Problems = append(c.Problems, Problem{Key: prefix + "." + p.Key, Msg: p.Msg})
	}
}

// Required reports s missing and returns whether it is set.
func (c *Checker) Required(key, s string) bool {
	if s == "" {
		c.Add(key, "required")
		return false
	}
	return true
}

// OneOf reports s unless it is one of allowed.
func (c *Checker) OneOf(key, s string, allowed ...string) {
	if !slices.Contains(allowed, s) {
		c.Add(key, "want one of %s; got %s", strings.Join(allowed, ", "), Quote(s))
	}
}

// IntRange reports n outside lo..hi and returns whether it is inside.
func (c *Checker) IntRange(key string, n, lo, hi int) bool {
	if n < lo || n > hi {
		c.Add(key, "must be between %d and %d, got %d", lo, hi, n)
		return false
	}
	return true
}

// DurRange reports d outside lo..hi and returns whether it is inside.
func (c *Checker) DurRange(key string, d, lo, hi time.Duration) bool {
	if d < lo || d > hi {
		c.Add(key, "must be between %s and %s, got %s", FormatDuration(lo), FormatDuration(hi), FormatDuration(d))
		return false
	}
	return true
}

// Positive reports a d that is not above zero and returns whether it is.
func (c *Checker) Positive(key string, d time.Duration) bool {
	if d <= 0 {
		c.Add(key, "must be positive, got %s", FormatDuration(d))
		return false
	}
	return true
}

// Secret rejects the placeholder that redacted output shows: it means someone copied
// `outboxd config check` output into the file.
func (c *Checker) Secret(key string, s Secret) {
	if s.Reveal() == Mask {
		c.Add(key, "holds the placeholder %s, not a secret", Mask)
	}
}

// Placeholder rejects the mask in a string that may embed credentials and returns
// whether it found one.
func (c *Checker) Placeholder(key, s string) bool {
	if strings.Contains(s, Mask) {
		c.Add(key, "holds the placeholder %s where a credential belongs", Mask)
		return true
	}
	return false
}

// Quote quotes a value that is not a secret for a message, cut to a readable length.
func Quote(s string) string {
	const limit = 60
	if len(s) > limit {
		cut := limit
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

// FormatDuration prints a duration the way people write one: 5m, not 5m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// HostPortProblem checks a host:port and returns what is wrong with it, or "". A
// listener may leave the host empty (all interfaces) and use port 0 (any free port).
func HostPortProblem(s string, listen bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return strings.TrimPrefix(err.Error(), "address "+s+": ")
	}
	if host == "" && !listen {
		return "no host"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !listen) {
		return "port must be a number from 1 to 65535"
	}
	return ""
}

// RedactURL replaces the password in a URL's userinfo and in password or sslpassword
// query parameters with repl. It works on the text, not on a parse, so that it also
// redacts URLs that do not parse. The userinfo is taken to end at the last '@', since a
// careless password may itself hold '@', '/', '?' or '#'; that can only redact too much.
// When userIsSecret, a userinfo without a password (a NATS token) is replaced whole.
func RedactURL(s, repl string, userIsSecret bool) string {
	return pgdsn.RedactURL(s, repl, userIsSecret)
}

// URLParseProblem explains why url.Parse rejected s without quoting any credential:
// it parses s again with the credentials replaced, and blames them if that succeeds.
func URLParseProblem(s string, userIsSecret bool) string {
	_, err := url.Parse(RedactURL(s, "x", userIsSecret))
	if err == nil {
		return "the user name or password is not percent-encoded correctly"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return strings.TrimPrefix(err.Error(), "net/url: ")
}

// DSN reports what is wrong with a PostgreSQL connection string (a postgres:// URL or
// key=value pairs) that would otherwise only show when connecting, and then in pgx's
// words, which quote the DSN: its form, scheme, port and sslmode. It reads no file and
// quotes no password.
func (c *Checker) DSN(key, s string) {
	switch {
	case c.Placeholder(key, s):
	case s == "":
		c.Add(key, "required: a postgres:// URL or key=value pairs")
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil {
			c.Add(key, "not a valid URL: %s", URLParseProblem(s, false))
			return
		}
		if u.Scheme != "postgres" && u.Scheme != "postgresql" {
			c.Add(key, "want a postgres:// or postgresql:// URL, got scheme %s", Quote(u.Scheme))
		}
		c.dsnParams(key, u.Port(), u.Query().Get("sslmode"))
	default:
		pairs, err := pgdsn.ParseKV(s)
		if err != nil {
			c.Add(key, "neither a postgres:// URL nor key=value pairs: %v", err)
			return
		}
		var port, sslmode string
		for _, p := range pairs {
			switch p.Key {
			case "port":
				port = pgdsn.Value(s[p.Start:p.End])
			case "sslmode":
				sslmode = pgdsn.Value(s[p.Start:p.End])
			}
		}
		c.dsnParams(key, port, sslmode)
	}
}

// sslModes are the values of sslmode that libpq and pgx know.
var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// dsnParams checks the DSN parameters a mistake in which only shows when connecting:
// the port and sslmode. A comma-separated port list, as for several hosts, is checked
// item by item.
func (c *Checker) dsnParams(key, port, sslmode string) {
	for p := range strings.SplitSeq(port, ",") {
		if p == "" {
			continue
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			c.Add(key, "the port must be a number from 1 to 65535, got %s", Quote(p))
		}
	}
	if sslmode != "" && !slices.Contains(sslModes, sslmode) {
		c.Add(key, "sslmode must be one of %s, got %s", strings.Join(sslModes, ", "), Quote(sslmode))
	}
}
