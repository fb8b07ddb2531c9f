package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unit is a systemd unit file: section → key → values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is neither a section nor a key=value", path, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

var unitPath = filepath.Join("systemd", "outboxd.service")

func TestTheSystemdUnitIsHardenedAndStopsGracefully(t *testing.T) {
	t.Parallel()
	u := parseUnit(t, unitPath)
	want := map[string]string{
		"DynamicUser":             "yes",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"RestrictSUIDSGID":        "yes",
		"MemoryDenyWriteExecute":  "yes",
		"CapabilityBoundingSet":   "",
		"SystemCallArchitectures": "native",
		"Restart":                 "on-failure",
	}
	for k, v := range want {
		if _, set := u["Service"][k]; !set || u.get("Service", k) != v {
			t.Errorf("[Service] %s=%q, want %q", k, u.get("Service", k), v)
		}
	}
	if fields := strings.Fields(u.get("Service", "ExecStart")); len(fields) < 2 || filepath.Base(fields[0]) != "outboxd" || fields[1] != "run" {
		t.Errorf("ExecStart=%s, want outboxd run", u.get("Service", "ExecStart"))
	}
	if ef := u.get("Service", "EnvironmentFile"); ef == "" || strings.HasPrefix(ef, "-") {
		t.Errorf("EnvironmentFile=%q, want a required file: without it outboxd has no database", ef)
	}
	// outboxd lets in-flight publishes finish for 10s after SIGTERM, then writes back.
	if sig := u.get("Service", "KillSignal"); sig != "" && sig != "SIGTERM" {
		t.Errorf("KillSignal=%s, want SIGTERM", sig)
	}
	stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec"))
	if err != nil || stop < 15*time.Second {
		t.Errorf("TimeoutStopSec=%s, want at least 15s (10s to finish publishing, then the write-back)", u.get("Service", "TimeoutStopSec"))
	}
	for _, f := range u["Service"]["SystemCallFilter"] {
		// Go's runtime calls setrlimit at start; a filter that kills it on that call
		// would stop outboxd before main.
		if strings.HasPrefix(f, "~") && strings.Contains(f, "@resources") && u.get("Service", "SystemCallErrorNumber") == "" {
			t.Errorf("SystemCallFilter=%s kills the Go runtime's setrlimit", f)
		}
	}
	if u.get("Install", "WantedBy") != "multi-user.target" {
		t.Errorf("[Install] WantedBy=%q, want multi-user.target", u.get("Install", "WantedBy"))
	}
}

func TestTheSystemdEnvironmentExampleIsAValidConfiguration(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("systemd", "outboxd.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	var environ []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			environ = append(environ, line)
		}
	}
	cfg := loadConfig(t, "", environ)
	if len(cfg.Streams) == 0 {
		t.Error("the example configures no stream: outboxd run would refuse to start")
	}
}

// systemdUnitCopy finds systemd-analyze, or skips the test (it would check nothing), and
// writes a copy of the unit whose ExecStart is an executable stand-in: verify checks
// that ExecStart can run.
func systemdUnitCopy(t *testing.T) (analyze, unit string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): nothing checked here; " +
			"the unit's keys are checked by TestTheSystemdUnitIsHardenedAndStopsGracefully")
	}
	dir := t.TempDir()
	standIn := filepath.Join(dir, "outboxd")
	if err := os.WriteFile(standIn, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?m)^ExecStart=\S+`).ReplaceAllString(string(data), "ExecStart="+standIn)
	unit = filepath.Join(dir, "outboxd.service")
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return analyze, unit
}

// TestSystemdVerifiesTheUnit runs systemd-analyze verify, which must report nothing.
func TestSystemdVerifiesTheUnit(t *testing.T) {
	t.Parallel()
	analyze, copyPath := systemdUnitCopy(t)
	out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
	if err != nil || strings.Contains(string(out), "outboxd.service") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdRatesTheUnitsSandboxOK runs systemd-analyze security offline: the sandbox
// must rate "OK" (exposure at most 2.0 of 10).
func TestSystemdRatesTheUnitsSandboxOK(t *testing.T) {
	t.Parallel()
	analyze, copyPath := systemdUnitCopy(t)
	out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", copyPath).CombinedOutput()
	if err != nil && strings.Contains(string(out), "unrecognized option") {
		t.Skipf("this systemd-analyze cannot rate a unit offline: nothing checked; %s", out)
	}
	m := regexp.MustCompile(`Overall exposure level for outboxd\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no exposure level: %v\n%s", err, out)
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2.0 {
		t.Errorf("systemd rates the unit's exposure %.1f of 10, want at most 2.0\n%s", level, out)
	}
}
