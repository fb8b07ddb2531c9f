package config

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/pgdsn"
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
			v.SetString(pgdsn.Redact(v.String()))
		case "urls":
			v.SetString(redactURLs(v.String()))
		}
	case kindList:
		if !v.IsNil() {
			v.Set(reflect.ValueOf(slices.Clone(v.Interface().([]string))))
		}
	case kindEntries:
		if v.IsNil() {
			return
		}
		list := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			list.Index(i).Set(v.Index(i))
			redactValue(list.Index(i), "")
		}
		v.Set(list)
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

// RedactDSN replaces the passwords in a PostgreSQL DSN with [REDACTED] (pgdsn.Redact).
func RedactDSN(s string) string { return pgdsn.Redact(s) }

// redactURLs redacts each URL of a comma-separated list, as NATS server lists are.
func redactURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = pgdsn.RedactURL(p, mask, true)
	}
	return strings.Join(parts, ",")
}

// RedactParseError returns err with the DSN a pgx parse error quotes redacted
// (pgdsn.RedactParseError).
func RedactParseError(err error) error { return pgdsn.RedactParseError(err) }

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
