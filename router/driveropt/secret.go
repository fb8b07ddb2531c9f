package driveropt

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/outboxd/outboxd/internal/pgdsn"
)

// Mask is what every printable form of a non-empty secret shows instead of it: the
// same placeholder the DSN and URL redaction writes (pgdsn.Mask).
const Mask = pgdsn.Mask

// Secret is a string that prints, marshals and logs as [REDACTED] (or as nothing when
// empty, so that "is it set?" stays visible). Only Reveal returns the value; call it at
// the point of use, never to build a message.
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) shown() string {
	if s == "" {
		return ""
	}
	return Mask
}

// String implements fmt.Stringer.
func (s Secret) String() string { return s.shown() }

// GoString implements fmt.GoStringer as a Go string literal.
func (s Secret) GoString() string { return strconv.Quote(s.shown()) }

// Format implements fmt.Formatter so that no verb (%x included) reaches the value.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, s.GoString())
		return
	}
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), s.shown())
}

// MarshalText implements encoding.TextMarshaler.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.shown())), nil }

// MarshalYAML implements yaml.Marshaler.
func (s Secret) MarshalYAML() (any, error) { return s.shown(), nil }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.shown()) }
