package testenv

import (
	"go/build"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GoBuild builds the command in the package directory pkg (as go build takes it, e.g.
// "../outboxd") into out, with the build tags given, and returns out. Tests build the
// commands they run as processes with it: the bench's dispatcher, outboxd beside
// outboxd-bench. It needs the go tool on PATH or in GOROOT.
func GoBuild(t testing.TB, pkg, out string, tags ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-tags", strings.Join(tags, ","), "-o", out, pkg)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s %s (needs the go tool on PATH): %v\n%s", out, pkg, err, msg)
	}
	return out
}
