// Package migrations holds the outbox schema as golang-migrate files and applies them.
//
// Invariant: a released migration file never changes; a new behaviour is a new version.
// The files are written for the default table outbox.messages so that psql and the
// migrate CLI can apply them unchanged; Render substitutes any other validated name.
// There are two layouts of the same schema, plain (the top directory) and partitioned
// (partitioned/); they carry the same versions and one version table, so a table keeps
// the layout it was created with and every later version exists in both.
//
// Package migrations is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
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

//go:embed *.sql partitioned/*.sql
var files embed.FS

// Layout is the storage shape of the outbox table. Both layouts have the same columns,
// constraints, indexes, trigger, functions and view, so producers and the dispatcher work
// unchanged on either; they differ in how retention removes delivered rows.
type Layout int

const (
	// Plain is one table; retention deletes delivered rows. The default.
	Plain Layout = iota
	// Partitioned is range-partitioned by created_at, with a default partition for rows
	// no time partition covers; retention drops whole partitions. The time partitions are
	// created and dropped at run time (store/partitions.go, store/partitiondrop.go).
	Partitioned
)

func (l Layout) String() string {
	if l == Partitioned {
		return "partitioned"
	}
	return "plain"
}

// relkind is the pg_class.relkind of a table created with this layout.
func (l Layout) relkind() string {
	if l == Partitioned {
		return "p"
	}
	return "r"
}

// source is the directory of this layout's files.
func (l Layout) source() (fs.FS, error) {
	switch l {
	case Plain:
		return files, nil
	case Partitioned:
		return fs.Sub(files, "partitioned")
	}
	return nil, fmt.Errorf("unknown migration layout %d", int(l))
}

// sqlFiles lists the migration files of a layout (its directory's *.sql, not below).
func (l Layout) sqlFiles() (fs.FS, []string, error) {
	src, err := l.source()
	if err != nil {
		return nil, nil, err
	}
	names, err := fs.Glob(src, "*.sql")
	if err != nil {
		return nil, nil, err
	}
	return src, names, nil
}

// The default names as they are spelled in the files: the channel literal, the schema,
// the qualified table and objects derived from it ("messages_<suffix>", qualified or not).
// One pattern, applied in a single pass, so a substituted name is never substituted again.
var (
	defaultNames = regexp.MustCompile(`'outbox\.messages'|\bSCHEMA IF NOT EXISTS outbox\b|\boutbox\.messages(_[a-z0-9_]+)?\b|\bmessages(_[a-z0-9_]+)\b`)
	versionName  = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)
)

// Render returns the plain layout's migration files with the default names replaced by n's.
func Render(n table.Name) (fs.FS, error) { return Plain.Render(n) }

// Render returns the layout's migration files with the default names replaced by n's.
func (l Layout) Render(n table.Name) (fs.FS, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	src, names, err := l.sqlFiles()
	if err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	for _, name := range names {
		b, err := fs.ReadFile(src, name)
		if err != nil {
			return nil, err
		}
		out[name] = &fstest.MapFile{Data: []byte(renderSQL(string(b), n)), Mode: 0o444}
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
// dispatcher of this build expects to find, whichever the layout (a test holds both
// layouts to the same versions).
func Latest() uint {
	versions, _ := Versions()
	if len(versions) == 0 {
		return 0
	}
	return versions[len(versions)-1]
}

// Versions lists the plain layout's migration versions in ascending order.
func Versions() ([]uint, error) { return Plain.Versions() }

// Versions lists the layout's migration versions in ascending order.
func (l Layout) Versions() ([]uint, error) {
	all, err := l.Migrations()
	if err != nil {
		return nil, err
	}
	versions := make([]uint, len(all))
	for i, m := range all {
		versions[i] = m.Version
	}
	return versions, nil
}

// Migration names one migration: its version and the name its files carry.
type Migration struct {
	Version uint
	Name    string
}

func (m Migration) String() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

// Migrations lists the layout's migrations in ascending version order.
func (l Layout) Migrations() ([]Migration, error) {
	_, names, err := l.sqlFiles()
	if err != nil {
		return nil, err
	}
	byVersion := map[uint]string{}
	for _, name := range names {
		m := versionName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("migration file %s does not follow <version>_<name>.(up|down).sql", name)
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("migration file %s: %w", name, err)
		}
		byVersion[uint(v)] = m[2]
	}
	out := make([]Migration, 0, len(byVersion))
	for v, name := range byVersion {
		out = append(out, Migration{Version: v, Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Between lists the layout's migrations with from < version <= to: those an up from
// version from to version to applied, or, with to = Latest(), those still pending.
func (l Layout) Between(from, to uint) ([]Migration, error) {
	all, err := l.Migrations()
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, m := range all {
		if m.Version > from && m.Version <= to {
			out = append(out, m)
		}
	}
	return out, nil
}

// Script returns the plain layout's rendered SQL of every migration in one direction.
func Script(n table.Name, direction string) (string, error) { return Plain.Script(n, direction) }

// Script returns the layout's rendered SQL of every migration in one direction, in the
// order it would be applied, for operators who apply schema changes with psql.
func (l Layout) Script(n table.Name, direction string) (string, error) {
	if direction != "up" && direction != "down" {
		return "", fmt.Errorf("direction must be up or down, got %q", direction)
	}
	rendered, err := l.Render(n)
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
