package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The verbs are held to the documents as the configuration keys are held to
// docs/configuration.md: every verb runCommand's switch accepts is documented as
// `outboxd <verb>` in README.md or docs/, and every `outboxd <verb>` they name is one the
// switch accepts. The switch is read from main.go's syntax, so a verb added there is
// checked without a list to update here.

// switchVerbs returns the string cases of the switch on cmd in runCommand, leaving out
// the flag spellings (--help, --version) of verbs that have a word too.
func switchVerbs(t *testing.T) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var verbs []string
	ast.Inspect(file, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "runCommand" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			if tag, ok := sw.Tag.(*ast.Ident); !ok || tag.Name != "cmd" {
				return true
			}
			for _, stmt := range sw.Body.List {
				for _, e := range stmt.(*ast.CaseClause).List {
					lit, ok := e.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					if !strings.HasPrefix(v, "-") {
						verbs = append(verbs, v)
					}
				}
			}
			return false
		})
		return false
	})
	if len(verbs) < 5 {
		t.Fatalf("found only %v in runCommand's switch on cmd: has main.go changed shape?", verbs)
	}
	return verbs
}

var (
	// quotedVerb is `outboxd <verb>…` in a code span.
	quotedVerb = regexp.MustCompile("`outboxd ([a-z][a-z-]*)")
	// shellVerb is a command line in a code block: outboxd <verb>…, maybe after a prompt.
	shellVerb = regexp.MustCompile(`^\s*(?:\$ )?outboxd ([a-z][a-z-]*)`)
)

// documentedVerbs maps each verb README.md and docs/*.md name to the files naming it.
func documentedVerbs(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	out := map[string][]string{}
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../../")
		inBlock := false
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			for _, m := range quotedVerb.FindAllStringSubmatch(line, -1) {
				out[m[1]] = append(out[m[1]], name)
			}
			if m := shellVerb.FindStringSubmatch(line); inBlock && m != nil {
				out[m[1]] = append(out[m[1]], name)
			}
		}
	}
	return out
}

func TestEveryVerbIsDocumentedAndEveryDocumentedVerbExists(t *testing.T) {
	t.Parallel()
	verbs := switchVerbs(t)
	documented := documentedVerbs(t)
	for _, v := range verbs {
		if len(documented[v]) == 0 {
			t.Errorf("the verb %q is in runCommand's switch but no `outboxd %s` is in README.md or docs/", v, v)
		}
	}
	for v, files := range documented {
		if !slices.Contains(verbs, v) {
			t.Errorf("%s names `outboxd %s`, which runCommand's switch does not accept", strings.Join(slices.Compact(files), ", "), v)
		}
	}
}
