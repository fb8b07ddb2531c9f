package config

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/router/driveropt"
)

// Redacted returns a deep copy safe to print: every non-empty Secret holds [REDACTED],
// and passwords inside the DSN, the NATS URLs and the tracing endpoint are replaced.
func (c Config) Redacted() Config {
	redactValue(reflect.ValueOf(&c).Elem(), "")
	return c
}

// Redacted returns a deep copy of d safe to print.
func (d Driver) Redacted() Driver {
	redactValue(reflect.ValueOf(&d).Elem(), "")
	return d
}

// redactValue redacts the addressable v in place, replacing maps and lists with copies
// so that nothing is shared with the original. how is the field's redact tag.
func redactValue(v reflect.Value, how string) {
	switch kindOf(v.Type()) {
	case kindSecret:
		if v.String() != "" {
			v.SetString(mask)
		}
	case kindString:
		switch how {
		case "dsn":
			v.SetString(RedactDSN(v.String()))
		case "urls":
			v.SetString(redactURLs(v.String()))
		}
	case kindList:
		if !v.IsNil() {
			v.Set(reflect.ValueOf(slices.Clone(v.Interface().([]string))))
		}
	case kindStruct:
		for _, f := range fieldsOf(v.Type()) {
			redactValue(v.FieldByIndex(f.index), f.redact)
		}
	case kindOptions:
		if v.IsNil() {
			return
		}
		o := reflect.New(v.Elem().Type()).Elem()
		o.Set(v.Elem())
		redactValue(o, "")
		v.Set(o)
	case kindMap:
		if v.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			redactValue(e, "")
			m.SetMapIndex(it.Key(), e)
		}
		v.Set(m)
	}
}

// RedactDSN replaces the passwords in a PostgreSQL DSN, URL or key=value form, with
// [REDACTED]. A key=value DSN it cannot parse is replaced whole, since it cannot tell
// where a password would end.
func RedactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	if strings.Contains(dsn, "://") {
		return redactURL(dsn, mask, false)
	}
	pairs, err := parseKV(dsn)
	if err != nil {
		return mask
	}
	out := dsn
	for _, p := range slices.Backward(pairs) {
		if isPasswordKey(p.key) {
			out = out[:p.start] + mask + out[p.end:]
		}
	}
	return out
}

func isPasswordKey(k string) bool { return driveropt.IsPasswordKey(k) }

// redactURLs redacts each URL of a comma-separated list, as NATS server lists are.
func redactURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactURL(p, mask, true)
	}
	return strings.Join(parts, ",")
}

// redactURL replaces the credentials in a URL with repl (see driveropt.RedactURL).
func redactURL(s, repl string, userIsSecret bool) string {
	return driveropt.RedactURL(s, repl, userIsSecret)
}

// urlParseProblem explains why url.Parse rejected s without quoting any credential.
func urlParseProblem(s string, userIsSecret bool) string {
	return driveropt.URLParseProblem(s, userIsSecret)
}

// kvValue is a key=value DSN value as written (start:end of a kvPair), unquoted.
func kvValue(raw string) string {
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
// by RedactDSN. pgx redacts the DSN it quotes itself, but misses a key=value password
// written as "password = x" or quoted with an escaped quote, and such a DSN reaches it
// whenever it fails to parse for another reason (an sslmode it does not know, a CA file
// it cannot read). Any other error is returned as it is.
func RedactParseError(err error) error {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err
	}
	safe := *pce
	safe.ConnString = RedactDSN(pce.ConnString)
	return &safe
}

// kvPair is one key=value of a libpq-style DSN; start:end spans the value as written.
type kvPair struct {
	key        string
	start, end int
}

// parseKV splits a key=value DSN (values may be single-quoted, with backslash escapes).
// Errors give positions, not text: the text may be part of a password.
func parseKV(s string) ([]kvPair, error) {
	var pairs []kvPair
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
		pairs = append(pairs, kvPair{key: key, start: start, end: i})
	}
	if len(pairs) == 0 {
		return nil, errors.New("no key=value pairs")
	}
	return pairs, nil
}

type (
	plainConfig Config // Config without its methods, for Format
	plainDriver Driver // Driver without its methods, for Format
)

// Format implements fmt.Formatter: every verb prints the redacted copy.
func (c Config) Format(f fmt.State, verb rune) {
	formatPlain(f, verb, plainConfig(c.Redacted()), "config.plainConfig", "config.Config")
}

// Format implements fmt.Formatter: every verb prints the redacted copy.
func (d Driver) Format(f fmt.State, verb rune) {
	formatPlain(f, verb, plainDriver(d.Redacted()), "config.plainDriver", "config.Driver")
}

func formatPlain(f fmt.State, verb rune, v any, plainName, name string) {
	s := fmt.Sprintf(fmt.FormatString(f, verb), v)
	if verb == 'v' && f.Flag('#') {
		s = strings.Replace(s, plainName, name, 1)
	}
	_, _ = io.WriteString(f, s)
}
