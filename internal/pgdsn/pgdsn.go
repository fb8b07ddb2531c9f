// Package pgdsn reads and redacts PostgreSQL connection strings (URL or key=value form)
// so that no password reaches a log line, an error or printed configuration. It is
// internal to outboxd, with no compatibility promise; config and migrations (and any
// other package that prints a DSN) share it without depending on each other.
//
// Invariant: every function here works on the text and never returns, in a result or an
// error, a password it was given.
package pgdsn

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask is what a redacted password reads.
const Mask = "[REDACTED]"

// Redact replaces the passwords in a PostgreSQL DSN, URL or key=value form, with
// [REDACTED]. A key=value DSN it cannot parse is replaced whole, since it cannot tell
// where a password would end.
func Redact(s string) string {
	if s == "" {
		return ""
	}
	if strings.Contains(s, "://") {
		return RedactURL(s, Mask, false)
	}
	pairs, err := ParseKV(s)
	if err != nil {
		return Mask
	}
	out := s
	for _, p := range slices.Backward(pairs) {
		if isPasswordKey(p.Key) {
			out = out[:p.Start] + Mask + out[p.End:]
		}
	}
	return out
}

func isPasswordKey(k string) bool {
	k = strings.ToLower(k)
	return k == "password" || k == "sslpassword"
}

// RedactURL replaces the password in a URL's userinfo and in password or sslpassword
// query parameters with repl. It works on the text, not on a parse, so that it also
// redacts URLs that do not parse. The userinfo is taken to end at the last '@', since a
// careless password may itself hold '@', '/', '?' or '#'; that can only redact too much.
// When userIsSecret, a userinfo without a password (a NATS token) is replaced whole.
func RedactURL(s, repl string, userIsSecret bool) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	rest := start
	if at := strings.LastIndex(s[start:], "@"); at >= 0 {
		at += start
		rest = at
		user, _, hasPassword := strings.Cut(s[start:at], ":")
		switch {
		case hasPassword:
			s = s[:start] + user + ":" + repl + s[at:]
			rest = start + len(user) + 1 + len(repl)
		case userIsSecret && at > start:
			s = s[:start] + repl + s[at:]
			rest = start + len(repl)
		}
	}
	q := strings.Index(s[rest:], "?")
	if q < 0 {
		return s
	}
	q += rest + 1
	end := len(s)
	if h := strings.Index(s[q:], "#"); h >= 0 {
		end = q + h
	}
	params := strings.Split(s[q:end], "&")
	for i, p := range params {
		k, _, ok := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil && ok && isPasswordKey(uk) {
			params[i] = k + "=" + repl
		}
	}
	return s[:q] + strings.Join(params, "&") + s[end:]
}

// Value is a key=value DSN value as written (Start:End of a Pair), unquoted.
func Value(raw string) string {
	if len(raw) >= 2 && raw[0] == '\'' {
		raw = raw[1 : len(raw)-1]
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+1 < len(raw) {
			i++
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

// RedactParseError returns err with the DSN a *pgconn.ParseConfigError quotes redacted
// by Redact. pgx redacts the DSN it quotes itself, but misses a key=value password
// written as "password = x" or quoted with an escaped quote, and such a DSN reaches it
// whenever it fails to parse for another reason (an sslmode it does not know, a CA file
// it cannot read). Any other error is returned as it is.
func RedactParseError(err error) error {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err
	}
	safe := *pce
	safe.ConnString = Redact(pce.ConnString)
	return &safe
}

// Pair is one key=value of a libpq-style DSN; Start:End spans the value as written.
type Pair struct {
	Key        string
	Start, End int
}

// ParseKV splits a key=value DSN (values may be single-quoted, with backslash escapes).
// Errors give positions, not text: the text may be part of a password.
func ParseKV(s string) ([]Pair, error) {
	var pairs []Pair
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	isKey := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		k := i
		for i < len(s) && isKey(s[i]) {
			i++
		}
		if i == k {
			return nil, fmt.Errorf("want a key (letters, digits, _) at byte %d", i+1)
		}
		key := s[k:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) || s[i] != '=' {
			return nil, fmt.Errorf("want = after the key ending at byte %d", k+len(key))
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return nil, fmt.Errorf("the quoted value starting at byte %d has no closing quote", start+1)
			}
			i++
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		pairs = append(pairs, Pair{Key: key, Start: start, End: i})
	}
	if len(pairs) == 0 {
		return nil, errors.New("no key=value pairs")
	}
	return pairs, nil
}
