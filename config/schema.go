package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/router"
)

// The schema of keys is the Config struct itself: decoding, the environment names,
// redaction, the YAML dump and the docs test all walk the same struct tags, so a field
// added to a struct is known everywhere at once.

type kind int

const (
	kindString kind = iota
	kindSecret
	kindInt
	kindBool
	kindFloat
	kindDuration
	kindList
	kindStruct
	kindMap
	// kindOptions is Driver.Options: a driver type's options struct, whose keys sit
	// inline in the driver's section.
	kindOptions
	// kindEntries is a list of sections (outboxes): file only, each entry's keys
	// under <key>[<n>].
	kindEntries
)

// String names the kind as docs/configuration.md does in its Type column.
func (k kind) String() string {
	return [...]string{"string", "secret", "int", "bool", "float", "duration", "list", "section", "map", "options", "entries"}[k]
}

// want describes a value of this kind for a type error.
func (k kind) want() string {
	return [...]string{"a string", "a string", "an integer", "true or false", "a number",
		"a duration such as 500ms or 30s", "a list", "a mapping of settings", "a mapping of names to settings",
		"a mapping of settings", "a list of mappings of settings"}[k]
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	secretType   = reflect.TypeFor[Secret]()
	streamType   = reflect.TypeFor[Stream]()
	driverType   = reflect.TypeFor[Driver]()
	optionsType  = reflect.TypeFor[router.Options]()
	configType   = reflect.TypeFor[Config]()
	outboxType   = reflect.TypeFor[Outbox]()
)

func kindOf(t reflect.Type) kind {
	switch t {
	case durationType:
		return kindDuration
	case secretType:
		return kindSecret
	case optionsType:
		return kindOptions
	}
	switch t.Kind() {
	case reflect.String:
		return kindString
	case reflect.Int:
		return kindInt
	case reflect.Bool:
		return kindBool
	case reflect.Float64:
		return kindFloat
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return kindList
		}
		if t.Elem().Kind() == reflect.Struct {
			return kindEntries
		}
	case reflect.Struct:
		return kindStruct
	case reflect.Map:
		if t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Struct {
			return kindMap
		}
	}
	panic("config: no kind for " + t.String())
}

// field is one key of a section.
type field struct {
	name   string // key in the file
	env    string // key as an environment variable segment
	index  []int  // struct field index, through inline embedded structs
	kind   kind   // what it holds
	typ    reflect.Type
	redact string // how to strip credentials from a plain string: "dsn", "urls" or ""
}

var fieldCache sync.Map // reflect.Type → []field

// inline is the yaml tag of a field whose keys belong to the section holding it: an
// embedded struct (options two drivers share) or Driver.Options.
const inline = ",inline"

// fieldsOf lists the keys of a section struct in declaration order; the keys of an
// embedded struct tagged inline appear in its place. Driver.Options is listed with
// the name "" and kindOptions: its keys depend on the driver's type.
func fieldsOf(t reflect.Type) []field {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]field)
	}
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		name := sf.Tag.Get("yaml")
		switch {
		case !sf.IsExported() || name == "":
			panic("config: field " + t.Name() + "." + sf.Name + " has no yaml tag")
		case name == inline && sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			for _, f := range fieldsOf(sf.Type) {
				f.index = append([]int{i}, f.index...)
				fs = append(fs, f)
			}
			continue
		case name == inline && sf.Type == optionsType:
			name = ""
		case name == inline:
			panic("config: field " + t.Name() + "." + sf.Name + " cannot be inline")
		}
		fs = append(fs, field{name: name, env: strings.ToUpper(name), index: []int{i}, kind: kindOf(sf.Type), typ: sf.Type,
			redact: sf.Tag.Get("redact")})
	}
	fieldCache.Store(t, fs)
	return fs
}

func fieldNamed(t reflect.Type, name string) (field, bool) {
	for _, f := range fieldsOf(t) {
		if f.name == name && f.kind != kindOptions {
			return f, true
		}
	}
	return field{}, false
}

// onlyText is the problem for a key of other driver types set on a driver.
func onlyText(only []string) string {
	if len(only) == 1 {
		return "only valid for type " + only[0]
	}
	return "only valid for types " + strings.Join(only[:len(only)-1], ", ") + " and " + only[len(only)-1]
}

// newEntry is the starting value of a map entry the file or environment creates.
func newEntry(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t {
	case streamType:
		v.Set(reflect.ValueOf(DefaultStream()))
	case outboxType:
		v.Set(reflect.ValueOf(defaultOutbox()))
	}
	return v
}

// join appends a key to a dotted path; an empty key shows as "" so that no path is empty.
func join(path, key string) string {
	if key == "" {
		key = `""`
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

const envPrefix = "OUTBOXD_"

// entryIndex is how a path names the entries of a list of sections, in knownKeys.
const entryIndex = "[<n>]"

// fileOnly is the variable column of a key that no environment variable sets.
const fileOnly = "—"

// entryPath names the entry i of the list of sections at path.
func entryPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// envFor turns a dotted key path into its environment variable; keys inside a list of
// sections have none.
func envFor(path string) string {
	if strings.Contains(path, "[") {
		return fileOnly
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "__"))
}

// keyInfo describes one leaf setting; map entries appear once, named <name>.
type keyInfo struct {
	path string
	env  string
	kind kind
	only []string // the driver types whose options hold the key; nil outside options
}

// knownKeys lists every leaf key in declaration order. The keys of driver options
// follow the driver's type, each once, with the registered types that have it.
func knownKeys(reg router.Registry) []keyInfo {
	var keys []keyInfo
	at := map[string]int{}
	var walk func(t reflect.Type, path, typ string)
	walk = func(t reflect.Type, path, typ string) {
		for _, f := range fieldsOf(t) {
			p := join(path, f.name)
			// An entry's sections are those of the top level (database, streams,
			// janitor): one key each, documented once, where they are.
			inEntry := strings.Contains(path, entryIndex) && (f.kind == kindStruct || f.kind == kindMap)
			switch {
			case inEntry:
				at[p] = len(keys)
				keys = append(keys, keyInfo{path: p, env: envFor(p), kind: f.kind})
				continue
			}
			switch f.kind {
			case kindStruct:
				walk(f.typ, p, typ)
			case kindMap:
				walk(f.typ.Elem(), p+".<name>", typ)
			case kindEntries:
				walk(f.typ.Elem(), p+entryIndex, typ)
			case kindOptions:
				for _, r := range reg {
					walk(reflect.TypeOf(r.Options()), path, r.Type)
				}
			default:
				if i, ok := at[p]; ok {
					keys[i].only = append(keys[i].only, typ)
					continue
				}
				k := keyInfo{path: p, env: envFor(p), kind: f.kind}
				if typ != "" {
					k.only = []string{typ}
				}
				at[p] = len(keys)
				keys = append(keys, k)
			}
		}
	}
	walk(configType, "", "")
	return keys
}

// optionKeys lists the leaf keys of an options type, relative to its section.
func optionKeys(t reflect.Type, path string) []string {
	var keys []string
	for _, f := range fieldsOf(t) {
		p := join(path, f.name)
		if f.kind == kindStruct {
			keys = append(keys, optionKeys(f.typ, p)...)
			continue
		}
		keys = append(keys, p)
	}
	return keys
}

// eachLeaf calls fn for every leaf under the struct v, with its dotted path. Map
// entries are visited in sorted order.
func eachLeaf(v reflect.Value, path string, fn func(path string, v reflect.Value, f field)) {
	for _, f := range fieldsOf(v.Type()) {
		p := join(path, f.name)
		fv := v.FieldByIndex(f.index)
		switch f.kind {
		case kindStruct:
			eachLeaf(fv, p, fn)
		case kindOptions:
			if !fv.IsNil() {
				eachLeaf(fv.Elem(), path, fn)
			}
		case kindMap:
			keys := fv.MapKeys()
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			for _, k := range keys {
				eachLeaf(fv.MapIndex(k), join(p, k.String()), fn)
			}
		case kindEntries:
			for i := range fv.Len() {
				eachLeaf(fv.Index(i), entryPath(p, i), fn)
			}
		default:
			fn(p, fv, f)
		}
	}
}

// suggest returns the candidate nearest to s when s looks like a typo of it, else "".
func suggest(s string, candidates []string) string {
	best, bestDist := "", 3 // at most two edits
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
