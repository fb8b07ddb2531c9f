package deploy_test

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			continue
		}
		cur.WriteString(line)
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			continue
		}
		cmd, args, _ := strings.Cut(text, " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	return out
}

// stages splits a Dockerfile's instructions at each FROM.
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

// shellWords splits a command line as a POSIX shell would, without expanding anything.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// goBuild is a go build invocation: environment assignments, flags without -o, the
// output and the package.
type goBuild struct {
	env    map[string]string
	flags  []string
	output string
	pkg    string
}

// parseGoBuild finds `go build` in words (after VAR=value assignments) and splits it.
func parseGoBuild(words []string) (goBuild, error) {
	b := goBuild{env: map[string]string{}}
	i := 0
	for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
		k, v, _ := strings.Cut(words[i], "=")
		b.env[k] = v
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
		return b, fmt.Errorf("not a go build command: %q", words)
	}
	rest := words[i+2:]
	for j := 0; j < len(rest); j++ {
		switch w := rest[j]; {
		case w == "-o" && j+1 < len(rest):
			b.output = rest[j+1]
			j++
		case strings.HasPrefix(w, "-o="):
			b.output = strings.TrimPrefix(w, "-o=")
		case strings.HasPrefix(w, "-"):
			b.flags = append(b.flags, w)
			// Flags that take a separate value.
			if (w == "-ldflags" || w == "-gcflags" || w == "-tags" || w == "-mod") && j+1 < len(rest) {
				b.flags = append(b.flags, rest[j+1])
				j++
			}
		default:
			if b.pkg != "" {
				return b, fmt.Errorf("two packages in %q", words)
			}
			b.pkg = w
		}
	}
	return b, nil
}

// varRef matches $(NAME), ${NAME} and $NAME.
var varRef = regexp.MustCompile(`\$(?:\(([A-Za-z_][A-Za-z0-9_]*)\)|\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)

// normalizeVars writes every variable reference as $NAME, after applying expand to it.
func normalizeVars(s string, expand func(name string) (string, bool)) string {
	for range 5 { // nested definitions, a few levels deep
		s = varRef.ReplaceAllStringFunc(s, func(m string) string {
			sub := varRef.FindStringSubmatch(m)
			name := sub[1] + sub[2] + sub[3]
			if v, ok := expand(name); ok {
				return v
			}
			return "$" + name
		})
	}
	return s
}

// dockerfileBuild is the go build of the Dockerfile's build stage.
func dockerfileBuild(t *testing.T) goBuild {
	t.Helper()
	for _, in := range dockerfile(t) {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		args := in.args
		for strings.HasPrefix(args, "--") { // RUN options such as --mount=…
			_, args, _ = strings.Cut(args, " ")
			args = strings.TrimSpace(args)
		}
		words, err := shellWords(normalizeVars(args, func(string) (string, bool) { return "", false }))
		if err != nil {
			t.Fatal(err)
		}
		b, err := parseGoBuild(words)
		if err != nil {
			t.Fatalf("Dockerfile: %v", err)
		}
		return b
	}
	t.Fatal("the Dockerfile runs no go build")
	return goBuild{}
}

// makefileBuild is the go build of the Makefile's build target, with the Makefile's
// own variables expanded (GO as go) except those computed by $(shell …), kept as $NAME.
func makefileBuild(t *testing.T) goBuild {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"GO": "go"}
	define := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?=|:=|::=|=)\s*(.*)$`)
	var recipe []string
	inBuild := false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case strings.HasPrefix(line, "\t"):
			if inBuild {
				recipe = append(recipe, strings.TrimSpace(line))
			}
		case strings.HasPrefix(line, "build:"):
			inBuild = true
		default:
			inBuild = false
			if m := define.FindStringSubmatch(line); m != nil && m[1] != "GO" && !strings.Contains(m[2], "$(shell") {
				vars[m[1]] = m[2]
			}
		}
	}
	for _, line := range recipe {
		line = strings.TrimLeft(line, "@-+")
		expanded := normalizeVars(line, func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
		if !strings.Contains(expanded, "go build") {
			continue
		}
		words, err := shellWords(expanded)
		if err != nil {
			t.Fatal(err)
		}
		b, err := parseGoBuild(words)
		if err != nil {
			t.Fatalf("Makefile build target: %v", err)
		}
		return b
	}
	t.Fatalf("the Makefile's build target runs no go build (recipe %q)", recipe)
	return goBuild{}
}

func TestTheImageBuildsWhatTheMakefileBuilds(t *testing.T) {
	t.Parallel()
	img, mk := dockerfileBuild(t), makefileBuild(t)
	if img.pkg != "./cmd/outboxd" || mk.pkg != img.pkg {
		t.Errorf("the image builds %q and the Makefile %q, want both ./cmd/outboxd", img.pkg, mk.pkg)
	}
	if img.env["CGO_ENABLED"] != "0" || mk.env["CGO_ENABLED"] != img.env["CGO_ENABLED"] {
		t.Errorf("CGO_ENABLED: image %q, Makefile %q; want 0 in both (a static binary for a distroless image)", img.env["CGO_ENABLED"], mk.env["CGO_ENABLED"])
	}
	if !slices.Equal(img.flags, mk.flags) {
		t.Errorf("go build flags differ:\n  image:    %q\n  Makefile: %q\nwant the same, so the image runs the binary `make build` produces", img.flags, mk.flags)
	}
	if !slices.Contains(img.flags, "-trimpath") {
		t.Errorf("the image's go build flags %q lack -trimpath", img.flags)
	}
}

func TestTheImageIsStaticNonRootAndServesTheAdminAPI(t *testing.T) {
	t.Parallel()
	st := stages(dockerfile(t))
	if len(st) < 2 {
		t.Fatalf("the Dockerfile has %d stages, want a build stage and a run stage", len(st))
	}
	builder := strings.Fields(st[0][0].args)
	if len(builder) == 0 || !strings.HasPrefix(builder[0], "golang:1.26") {
		t.Errorf("the build stage is FROM %q, want golang:1.26 (go.mod's Go)", st[0][0].args)
	}
	final := st[len(st)-1]
	base := strings.Fields(final[0].args)[0]
	if base != "scratch" && !(strings.HasPrefix(base, "gcr.io/distroless/static") && strings.HasSuffix(base, ":nonroot")) {
		t.Errorf("the image is based on %s, want distroless static (nonroot) or scratch", base)
	}
	last := map[string]string{}
	for _, in := range final {
		last[in.cmd] = in.args
		if in.cmd == "ENV" {
			k, v, _ := strings.Cut(in.args, "=")
			last["ENV "+k] = v
		}
	}
	user, _, _ := strings.Cut(last["USER"], ":")
	if uid, err := strconv.Atoi(user); user == "" || user == "root" || (err == nil && uid == 0) {
		t.Errorf("the image runs as user %q, want a non-root user", last["USER"])
	}
	if last["EXPOSE"] != strconv.Itoa(adminPort) {
		t.Errorf("the image exposes %q, want %d", last["EXPOSE"], adminPort)
	}
	var entrypoint, cmd []string
	if err := json.Unmarshal([]byte(last["ENTRYPOINT"]), &entrypoint); err != nil || len(entrypoint) != 1 {
		t.Errorf("ENTRYPOINT %s, want the exec form naming the binary alone", last["ENTRYPOINT"])
	}
	if err := json.Unmarshal([]byte(last["CMD"]), &cmd); err != nil || !slices.Equal(cmd, []string{"run"}) {
		t.Errorf("CMD %s, want [\"run\"]", last["CMD"])
	}
	if b := dockerfileBuild(t); len(entrypoint) == 1 && b.output != entrypoint[0] {
		t.Errorf("the build writes %s but the image runs %v", b.output, entrypoint)
	}
	if !strings.Contains(last["COPY"], "--from=") || !strings.HasSuffix(last["COPY"], " "+path.Clean(dockerfileBuild(t).output)) {
		t.Errorf("the run stage copies %q, want the build stage's binary", last["COPY"])
	}
	checkAdminAddr(t, "Dockerfile ENV", last["ENV OUTBOXD_HTTP__ADDR"])
}

func TestTheBuildContextKeepsEverythingTheBuildNeeds(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	needed := []string{"go.mod", "go.sum", "cmd/outboxd/main.go", "migrations/0001_outbox.up.sql",
		"migrations/partitioned/0001_outbox.up.sql", "store/store.go", "router/router.go", "events/tracing/tracing.go"}
	for _, f := range needed {
		if _, err := os.Stat(filepath.Join(repoRoot, f)); err != nil {
			t.Errorf("%s: %v (update this list)", f, err)
		}
		for _, p := range patterns {
			if ignored(p, f) {
				t.Errorf("Dockerfile.dockerignore pattern %q leaves %s out of the build", p, f)
			}
		}
	}
}

// ignored reports whether a .dockerignore pattern excludes file or a directory holding it.
func ignored(pattern, file string) bool {
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		for dir := file; dir != "."; dir = path.Dir(dir) {
			if m, _ := path.Match(rest, path.Base(dir)); m {
				return true
			}
		}
		return false
	}
	for dir := file; dir != "."; dir = path.Dir(dir) {
		if m, _ := path.Match(pattern, dir); m {
			return true
		}
	}
	return false
}

// TestTheImagesBuildCommandBuildsAStaticStrippedBinary runs the Dockerfile's go build
// here (there is no Docker engine) and checks what it produced.
func TestTheImagesBuildCommandBuildsAStaticStrippedBinary(t *testing.T) {
	t.Parallel()
	b := dockerfileBuild(t)
	bin := filepath.Join(t.TempDir(), "outboxd")
	const version = "deploy-test-1.2.3"
	args := []string{"build"}
	for _, f := range b.flags {
		args = append(args, strings.ReplaceAll(f, "$VERSION", version))
	}
	args = append(args, "-o", bin, b.pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = os.Environ()
	for k, v := range b.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v): it cannot run on distroless/static", p.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags -s was not applied")
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("outboxd version: %v %q, want the version given at build time (%s)", err, out, version)
	}
}
