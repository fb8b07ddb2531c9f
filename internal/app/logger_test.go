package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
)

func TestJSONLogsWriteDurationsWithUnitsAndLeaveOutANilErr(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	var noErr error
	logger.Info("paused", "pause", 1500*time.Millisecond, "err", noErr)
	logger.With("lease", 30*time.Second).Warn("failed", "err", errors.New("broker refused"))
	logger.Info("stopped", "err", nil)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 log lines, got %d:\n%s", len(lines), buf.String())
	}
	var rec []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, l)
		}
		rec = append(rec, m)
	}
	if got := rec[0]["pause"]; got != "1.5s" {
		t.Errorf(`"pause" = %#v, want "1.5s" (a duration with its unit, not nanoseconds)`, got)
	}
	if got, ok := rec[0]["err"]; ok {
		t.Errorf(`a nil error was logged as "err": %#v; it should be left out`, got)
	}
	if got := rec[1]["lease"]; got != "30s" {
		t.Errorf(`"lease" (from With) = %#v, want "30s"`, got)
	}
	if got := rec[1]["err"]; got != "broker refused" {
		t.Errorf(`a real error must still be logged: "err" = %#v`, got)
	}
	if got, ok := rec[2]["err"]; ok {
		t.Errorf(`an untyped nil was logged as "err": %#v; it should be left out`, got)
	}
}
