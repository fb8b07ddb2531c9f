package app

import (
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
)

// NewLogger builds the process logger from the log settings (validated by config).
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// replaceAttr keeps log lines readable by people and by log pipelines alike. slog's JSON
// handler writes a time.Duration as its count of nanoseconds, a number nobody reads
// right ("pause":30000000000); it is written with its unit instead ("30s"). An "err"
// that is nil says nothing, and a null where a log query expects text breaks it, so the
// attribute is left out.
func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindAny:
		if a.Key == "err" && a.Value.Any() == nil {
			return slog.Attr{} // an empty attribute is dropped by the handler
		}
		if d, ok := a.Value.Any().(time.Duration); ok { // reached through a LogValuer or a typed any
			return slog.String(a.Key, d.String())
		}
	}
	return a
}
