// Package migrations holds the outbox schema as golang-migrate files and applies them.
//
// Invariant: a released migration file never changes; a new behaviour is a new version.
// The files are written for the default table outbox.messages so that psql and the
// migrate CLI can apply them unchanged; Render substitutes any other validated name.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"

	"github.com/outboxd/outboxd/table"
)

//go:embed *.sql
var files embed.FS

// The default names as they are spelled in the files: the channel literal, the schema,
// the qualified table and objects derived from it ("messages_<suffix>", qualified or not).
// One pattern, applied in a single pass, so a substituted name is never substituted again.
var (
	defaultNames  = regexp.MustCompile(`'outbox\.messages'|\bSCHEMA IF NOT EXISTS outbox\b|\boutbox\.messages(_[a-z0-9_]+)?\b|\bmessages(_[a-z0-9_]+)\b`)
	versionPrefix = regexp.MustCompile(`^(\d+)_[a-z0-9_]+\.(up|down)\.sql$`)
)

// Render returns the migration files with the default names replaced by n's.
func Render(n table.Name) (fs.FS, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = &fstest.MapFile{Data: []byte(renderSQL(string(b), n)), Mode: 0o444}
	}
	return out, nil
}

func renderSQL(sql string, n table.Name) string {
	return defaultNames.ReplaceAllStringFunc(sql, func(m string) string {
		switch {
		case m == "'outbox.messages'":
			return "'" + n.Channel() + "'"
		case strings.HasPrefix(m, "SCHEMA"):
			return "SCHEMA IF NOT EXISTS " + table.Quote(n.Schema)
		}
		parts := defaultNames.FindStringSubmatch(m)
		if strings.HasPrefix(m, "outbox.") {
			return table.Quote(n.Schema) + "." + table.Quote(n.Table+parts[1])
		}
		return table.Quote(n.Table + parts[2])
	})
}

// Latest is the highest migration version embedded in this binary: the version a
// dispatcher of this build expects to find.
func Latest() uint {
	versions, _ := Versions()
	if len(versions) == 0 {
		return 0
	}
	return versions[len(versions)-1]
}

// Versions lists the embedded migration versions in ascending order.
func Versions() ([]uint, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	seen := map[uint]bool{}
	for _, e := range entries {
		m := versionPrefix.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s does not follow <version>_<name>.(up|down).sql", e.Name())
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("migration file %s: %w", e.Name(), err)
		}
		seen[uint(v)] = true
	}
	versions := make([]uint, 0, len(seen))
	for v := range seen {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	return versions, nil
}

// Script returns the rendered SQL of every migration in one direction, in the order it
// would be applied, for operators who apply schema changes with psql.
func Script(n table.Name, direction string) (string, error) {
	if direction != "up" && direction != "down" {
		return "", fmt.Errorf("direction must be up or down, got %q", direction)
	}
	rendered, err := Render(n)
	if err != nil {
		return "", err
	}
	names, err := fs.Glob(rendered, "*."+direction+".sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	if direction == "down" {
		sort.Sort(sort.Reverse(sort.StringSlice(names)))
	}
	var b strings.Builder
	for _, name := range names {
		data, err := fs.ReadFile(rendered, name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "-- %s\n%s\n", name, data)
	}
	return b.String(), nil
}
