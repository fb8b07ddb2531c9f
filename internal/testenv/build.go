package testenv

import (
	"go/build"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GoBuild builds the command in the package directory pkg (as go build takes it, e.g.
// "../outboxd") into out, with the build tags given, and returns out; it fails t when
// the build does. Tests build the commands they run as processes with it: the bench's
// dispatcher, outboxd beside outboxd-bench. It needs the go tool on PATH or in GOROOT.
func GoBuild(t testing.TB, pkg, out string, tags ...string) string {
	t.Helper()
	if msg, err := Build(pkg, out, tags...); err != nil {
		t.Fatalf("go build -o %s %s (needs the go tool on PATH): %v\n%s", out, pkg, err, msg)
	}
	return out
}

// Build is GoBuild for a caller that builds once for many tests (inside a sync.Once,
// where failing the first test alone would hide why the others fail): it returns the go
// tool's output and error instead.
func Build(pkg, out string, tags ...string) ([]byte, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	return exec.Command(goTool, "build", "-tags", strings.Join(tags, ","), "-o", out, pkg).CombinedOutput()
}
