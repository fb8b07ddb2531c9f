package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheDefaultDispatcherIsTheOutboxdBesideTheBenchsExecutable lays out directories
// as make build and a symlinked install leave them: outboxd-bench has no run verb, so
// the drains must run the outboxd beside it, found through a symbolic link to it, and a
// layout without one must name --dispatcher-binary rather than run itself.
func TestTheDefaultDispatcherIsTheOutboxdBesideTheBenchsExecutable(t *testing.T) {
	t.Parallel()
	bin, elsewhere, alone := t.TempDir(), t.TempDir(), t.TempDir()
	touch := func(path string) string {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bench, outboxd := touch(filepath.Join(bin, "outboxd-bench")), touch(filepath.Join(bin, "outboxd"))
	link := filepath.Join(elsewhere, "outboxd-bench")
	if err := os.Symlink(bench, link); err != nil {
		t.Fatal(err)
	}
	lonely := touch(filepath.Join(alone, "outboxd-bench"))
	cases := []struct {
		name       string
		flag, self string
		want       string // the binary chosen, or
		wantErr    string // what the refusal says
	}{
		{"make build's layout runs the outboxd beside it", "", bench, outboxd, ""},
		{"a symbolic link to outboxd-bench runs the outboxd beside its target", "", link, outboxd, ""},
		{"no outboxd beside it is named with the way out", "", lonely, "", filepath.Join(alone, "outboxd") + ": no such file"},
		{"the way out is --dispatcher-binary", "", lonely, "", "build outboxd beside it (make build builds both) or pass --dispatcher-binary"},
		{"a test binary is refused", "", filepath.Join(bin, "bench.test"), "", "build outboxd and pass it with --dispatcher-binary"},
		{"--dispatcher-binary wins", outboxd, lonely, outboxd, ""},
		{"a missing --dispatcher-binary is named", filepath.Join(alone, "outboxd"), bench, "", "--dispatcher-binary"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := dispatcherBinary(c.flag, func() (string, error) { return c.self, nil })
			if c.wantErr == "" && (err != nil || got != c.want) {
				t.Fatalf("dispatcherBinary(%q) from %s = %q, %v; want %q", c.flag, c.self, got, err, c.want)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("dispatcherBinary(%q) from %s = %q, %v; want an error saying %q", c.flag, c.self, got, err, c.wantErr)
			}
		})
	}
	if _, err := dispatcherBinary("", func() (string, error) { return "", errors.New("no /proc") }); err == nil || !strings.Contains(err.Error(), "--dispatcher-binary") {
		t.Errorf("without its own executable: %v, want an error naming --dispatcher-binary", err)
	}
}
