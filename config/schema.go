package config

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
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
)

// String names the kind as docs/configuration.md does in its Type column.
func (k kind) String() string {
	return [...]string{"string", "secret", "int", "bool", "float", "duration", "list", "section", "map"}[k]
}

// want describes a value of this kind for a type error.
func (k kind) want() string {
	return [...]string{"a string", "a string", "an integer", "true or false", "a number",
		"a duration such as 500ms or 30s", "a list", "a mapping of settings", "a mapping of names to settings"}[k]
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	secretType    = reflect.TypeFor[Secret]()
	streamType    = reflect.TypeFor[Stream]()
	driverType    = reflect.TypeFor[Driver]()
	provisionType = reflect.TypeFor[Provision]()
	configType    = reflect.TypeFor[Config]()
)

func kindOf(t reflect.Type) kind {
	switch {
	case t == durationType:
		return kindDuration
	case t == secretType:
		return kindSecret
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
	index  int    // struct field index
	kind   kind   // what it holds
	typ    reflect.Type
	only   []string // driver types it belongs to; nil for all
	redact string   // how to strip credentials from a plain string: "dsn", "urls" or ""
}

var fieldCache sync.Map // reflect.Type → []field

// fieldsOf lists the keys of a section struct in declaration order.
func fieldsOf(t reflect.Type) []field {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]field)
	}
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		name := sf.Tag.Get("yaml")
		if name == "" || !sf.IsExported() {
			panic("config: field " + t.Name() + "." + sf.Name + " has no yaml tag")
		}
		f := field{name: name, env: strings.ToUpper(name), index: i, kind: kindOf(sf.Type), typ: sf.Type,
			redact: sf.Tag.Get("redact")}
		if only := sf.Tag.Get("only"); only != "" {
			f.only = strings.Split(only, ",")
		}
		fs = append(fs, f)
	}
	fieldCache.Store(t, fs)
	return fs
}

func fieldNamed(t reflect.Type, name string) (field, bool) {
	for _, f := range fieldsOf(t) {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

// allows reports whether a field restricted to only belongs to a driver of type typ.
func allows(only []string, typ string) bool { return only == nil || slices.Contains(only, typ) }

func knownType(typ string) bool {
	return typ == TypeKafka || typ == TypeNATS || typ == TypeJetStream || typ == TypeDiscard
}

// onlyText is the problem for a field set on a driver of another type.
func onlyText(only []string) string {
	if len(only) == 1 {
		return "only valid for type " + only[0]
	}
	return "only valid for types " + strings.Join(only[:len(only)-1], ", ") + " and " + only[len(only)-1]
}

// newEntry is the starting value of a map entry the file or environment creates.
func newEntry(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	if t == streamType {
		v.Set(reflect.ValueOf(DefaultStream()))
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

// envFor turns a dotted key path into its environment variable.
func envFor(path string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "__"))
}

// keyInfo describes one leaf setting; map entries appear once, named <name>.
type keyInfo struct {
	path string
	env  string
	kind kind
	only []string
}

// knownKeys lists every leaf key in declaration order.
func knownKeys() []keyInfo {
	var keys []keyInfo
	var walk func(t reflect.Type, path string, only []string)
	walk = func(t reflect.Type, path string, only []string) {
		for _, f := range fieldsOf(t) {
			p, o := join(path, f.name), f.only
			if o == nil {
				o = only
			}
			switch f.kind {
			case kindStruct:
				walk(f.typ, p, o)
			case kindMap:
				walk(f.typ.Elem(), p+".<name>", o)
			default:
				keys = append(keys, keyInfo{path: p, env: envFor(p), kind: f.kind, only: o})
			}
		}
	}
	walk(configType, "", nil)
	return keys
}

// eachLeaf calls fn for every leaf under the struct v, with its dotted path and the
// driver types it belongs to. Map entries are visited in sorted order; fn may set the
// leaf when v is addressable and holds no maps.
func eachLeaf(v reflect.Value, path string, only []string, fn func(path string, v reflect.Value, f field, only []string)) {
	for _, f := range fieldsOf(v.Type()) {
		p, o := join(path, f.name), f.only
		if o == nil {
			o = only
		}
		fv := v.Field(f.index)
		switch f.kind {
		case kindStruct:
			eachLeaf(fv, p, o, fn)
		case kindMap:
			keys := fv.MapKeys()
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			for _, k := range keys {
				eachLeaf(fv.MapIndex(k), join(p, k.String()), o, fn)
			}
		default:
			fn(p, fv, f, o)
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
