package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The verbs are held to the documents as the configuration keys are held to
// docs/configuration.md: every verb of the commands table is documented as
// `outboxd <verb>` in README.md or docs/, and every `outboxd <verb>` they name is one
// the table has. The table is what runCommand dispatches on, so a verb added there is
// checked without a list to update here.

// tableVerbs returns the verbs of the commands table.
func tableVerbs(t *testing.T) []string {
	t.Helper()
	verbs := slices.Sorted(maps.Keys(commands))
	if len(verbs) < 5 {
		t.Fatalf("found only %v in the commands table", verbs)
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
	verbs := tableVerbs(t)
	documented := documentedVerbs(t)
	for _, v := range verbs {
		if len(documented[v]) == 0 {
			t.Errorf("the verb %q is in the commands table but no `outboxd %s` is in README.md or docs/", v, v)
		}
	}
	for v, files := range documented {
		if !slices.Contains(verbs, v) {
			t.Errorf("%s names `outboxd %s`, which the commands table does not have", strings.Join(slices.Compact(files), ", "), v)
		}
	}
}
