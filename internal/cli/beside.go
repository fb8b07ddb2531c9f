package cli

import (
	"os"
	"path/filepath"
	"runtime"
)

// Beside is the path of the program named name (".exe" added on Windows) in the
// directory of the executable at self, symbolic links in self resolved: outboxd and
// outboxd-bench find each other there, never on PATH, where another version could
// answer. The error, when the program is not there, is os.Stat's, and the path is
// returned with it so that the caller can name where it looked.
func Beside(self, name string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	path := filepath.Join(filepath.Dir(self), name)
	_, err := os.Stat(path)
	return path, err
}
