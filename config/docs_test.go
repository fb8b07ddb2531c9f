package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

const docPath = "../docs/configuration.md"

// docRow is one row of a key table in docs/configuration.md.
type docRow struct {
	line                        int
	key, env, typ, def, meaning string
}

// docRows reads every table row whose first cell is a backquoted key.
func docRows(t *testing.T) []docRow {
	t.Helper()
	data, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("read the configuration docs: %v", err)
	}
	var rows []docRow
	for i, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) != 5 {
			t.Errorf("%s:%d: want 5 cells (key, variable, type, default, meaning), got %d", docPath, i+1, len(cells))
			continue
		}
		rows = append(rows, docRow{line: i + 1, key: strings.Trim(cells[0], "`"), env: strings.Trim(cells[1], "`"),
			typ: cells[2], def: cells[3], meaning: cells[4]})
	}
	return rows
}

// docDefault is how the Default column starts for a key: the default as YAML() writes
// it, in backquotes, or "—" for none. replica_id's default is computed at run time.
func docDefault(k keyInfo) string {
	var root reflect.Value
	rel := k.path
	switch {
	case k.path == "replica_id":
		return "hostname-pid"
	case strings.HasPrefix(k.path, "outboxes"+entryIndex+"."):
		if k.kind == kindStruct || k.kind == kindMap { // as the top-level section
			return "—"
		}
		root, rel = reflect.ValueOf(defaultOutbox()), strings.TrimPrefix(k.path, "outboxes"+entryIndex+".")
	case strings.HasPrefix(k.path, "streams.<name>."):
		root, rel = reflect.ValueOf(DefaultStream()), strings.TrimPrefix(k.path, "streams.<name>.")
	case strings.HasPrefix(k.path, "drivers.<name>."):
		rel = strings.TrimPrefix(k.path, "drivers.<name>.")
		if k.only == nil { // type
			return "—"
		}
		reg, _ := registry.Lookup(k.only[0])
		root = reflect.ValueOf(reg.Options())
	default:
		root = reflect.ValueOf(Default())
	}
	v := fieldAt(root, rel)
	if v.IsZero() && (v.Kind() == reflect.String || v.Kind() == reflect.Slice) {
		return "—"
	}
	return "`" + toNode(v).Value + "`"
}

func TestDocsListEveryKeyAndNoOther(t *testing.T) {
	t.Parallel()
	rows := docRows(t)
	byKey := map[string]docRow{}
	for _, r := range rows {
		if _, dup := byKey[r.key]; dup {
			t.Errorf("%s:%d: %s is listed twice", docPath, r.line, r.key)
		}
		byKey[r.key] = r
	}
	known := map[string]bool{}
	for _, k := range knownKeys(registry) {
		known[k.path] = true
		r, ok := byKey[k.path]
		if !ok {
			t.Errorf("%s does not document %s", docPath, k.path)
			continue
		}
		if r.env != k.env {
			t.Errorf("%s:%d: %s has variable %s, want %s", docPath, r.line, k.path, r.env, k.env)
		}
		if r.typ != k.kind.String() {
			t.Errorf("%s:%d: %s has type %s, want %s", docPath, r.line, k.path, r.typ, k.kind)
		}
		if want := docDefault(k); !strings.HasPrefix(r.def, want) {
			t.Errorf("%s:%d: %s has default %s, want it to start %s", docPath, r.line, k.path, r.def, want)
		}
		if r.meaning == "" {
			t.Errorf("%s:%d: %s has no meaning", docPath, r.line, k.path)
		}
	}
	for _, r := range rows {
		if !known[r.key] {
			t.Errorf("%s:%d: documents %s, which is not a key", docPath, r.line, r.key)
		}
	}
}
