package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// decoder overlays the file and the environment onto a Config, recording every problem
// and where each value came from.
type decoder struct {
	ps problems
	// origin maps a key path (leaf or map entry) to where its value was last set:
	// "line 12" or "from OUTBOXD_X". Load uses it to place validation problems and to
	// tell explicitly set fields from defaults.
	origin map[string]string
	// budget bounds the YAML nodes visited, so aliases cannot multiply the work.
	budget int
	// registry gives each driver type's options; envTypes holds the driver types the
	// environment sets (by driver name), which take precedence over the file's and
	// must be known before a driver's section is decoded.
	registry router.Registry
	envTypes map[string]string
	// driver is the section of the driver being decoded, or nil.
	driver *driverAt
}

// driverAt is a driver's section: its key path and its type.
type driverAt struct{ path, typ string }

const nodeBudget = 200_000

func newDecoder(reg router.Registry, environ []string) *decoder {
	return &decoder{origin: map[string]string{}, budget: nodeBudget, registry: reg, envTypes: envDriverTypes(environ)}
}

// file overlays YAML data onto cfg.
func (d *decoder) file(cfg *Config, data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decodeYAML(dec, &doc); err != nil {
		if !errors.Is(err, io.EOF) {
			d.ps.add(FileKey, "not valid YAML: %s", yamlErrText(err))
		}
		return
	}
	var extra yaml.Node
	switch err := decodeYAML(dec, &extra); {
	case err == nil:
		d.ps.add(FileKey, "holds more than one YAML document (line %d); keep everything in one", extra.Line)
	case !errors.Is(err, io.EOF):
		d.ps.add(FileKey, "not valid YAML: %s", yamlErrText(err))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	root = d.deref(FileKey, root)
	switch {
	case root == nil || isNull(root):
		return // an empty file, or one holding only comments
	case root.Kind != yaml.MappingNode:
		d.ps.add(FileKey, "want a mapping of settings at the top level, got %s", describe(root))
		return
	}
	d.value("", reflect.ValueOf(cfg).Elem(), root)
}

// decodeYAML turns a parser panic into an error: a bad file is a problem to report,
// never a crash.
func decodeYAML(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

func yamlErrText(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// deref follows aliases and spends the node budget; nil means stop.
func (d *decoder) deref(path string, n *yaml.Node) *yaml.Node {
	for hops := 0; n != nil && n.Kind == yaml.AliasNode; hops++ {
		if hops > 100 {
			d.ps.add(keyOrFile(path), "aliases nest too deeply (line %d)", n.Line)
			return nil
		}
		n = n.Alias
	}
	if n == nil {
		return nil
	}
	d.budget--
	if d.budget == 0 {
		d.ps.add(FileKey, "too large once aliases are expanded (more than %d values)", nodeBudget)
	}
	if d.budget <= 0 {
		return nil
	}
	return n
}

func keyOrFile(path string) string {
	if path == "" {
		return FileKey
	}
	return path
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe names what a node holds without quoting it: the value might be a secret
// written in the wrong place.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}

// value decodes node n into v, the setting at path. A null value leaves v unchanged.
func (d *decoder) value(path string, v reflect.Value, n *yaml.Node) {
	n = d.deref(path, n)
	if n == nil || isNull(n) {
		return
	}
	k := kindOf(v.Type())
	switch k {
	case kindStruct, kindMap:
		if n.Kind != yaml.MappingNode {
			d.ps.add(path, "want %s, got %s (line %d)", k.want(), describe(n), n.Line)
			return
		}
		d.mapping(path, v, n)
	case kindEntries:
		if n.Kind != yaml.SequenceNode {
			d.ps.add(path, "want a list of mappings, got %s (line %d)", describe(n), n.Line)
			return
		}
		if len(n.Content) == 0 {
			v.SetZero() // as if left out
			break
		}
		list := reflect.MakeSlice(v.Type(), 0, len(n.Content))
		for i, item := range n.Content {
			elem := newEntry(v.Type().Elem())
			d.value(entryPath(path, i), elem, item)
			list = reflect.Append(list, elem)
		}
		v.Set(list)
	case kindList:
		if n.Kind != yaml.SequenceNode {
			d.ps.add(path, "want a list, got %s (line %d)", describe(n), n.Line)
			return
		}
		list := make([]string, 0, len(n.Content))
		for i, item := range n.Content {
			item = d.deref(path, item)
			if item == nil {
				return
			}
			if item.Kind != yaml.ScalarNode || isNull(item) {
				d.ps.add(path, "item %d: want a string, got %s (line %d)", i+1, describe(item), item.Line)
				return
			}
			list = append(list, item.Value)
		}
		v.Set(reflect.ValueOf(list))
	default:
		if n.Kind != yaml.ScalarNode {
			d.ps.add(path, "want %s, got %s (line %d)", k.want(), describe(n), n.Line)
			return
		}
		if msg := setScalar(v, k, n.Value, n.ShortTag()); msg != "" {
			d.ps.add(path, "%s (line %d)", msg, n.Line)
			return
		}
	}
	d.origin[path] = fmt.Sprintf("line %d", n.Line)
}

// mapping decodes the pairs of n into the section struct or the map v.
func (d *decoder) mapping(path string, v reflect.Value, n *yaml.Node) {
	if v.Type() == driverType {
		d.driverSection(path, v, n)
		return
	}
	d.pairs(path, v, n)
}

// pairs decodes the key-value pairs of the mapping n into the struct or map v.
func (d *decoder) pairs(path string, v reflect.Value, n *yaml.Node) {
	isMap := v.Kind() == reflect.Map
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn := d.deref(path, n.Content[i])
		if kn == nil {
			return
		}
		if kn.Kind != yaml.ScalarNode {
			d.ps.add(keyOrFile(path), "keys must be plain names, got %s (line %d)", describe(kn), kn.Line)
			continue
		}
		if kn.ShortTag() == "!!merge" {
			d.ps.add(keyOrFile(path), "merge keys (<<) are not supported (line %d)", kn.Line)
			continue
		}
		key := kn.Value
		p := join(path, key)
		if line, dup := seen[key]; dup {
			d.ps.add(p, "set twice (lines %d and %d)", line, kn.Line)
			continue
		}
		seen[key] = kn.Line
		if isMap {
			elem := newEntry(v.Type().Elem())
			if old := v.MapIndex(reflect.ValueOf(key)); old.IsValid() {
				elem.Set(old)
			}
			d.value(p, elem, n.Content[i+1])
			if v.IsNil() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			v.SetMapIndex(reflect.ValueOf(key), elem)
			d.origin[p] = fmt.Sprintf("line %d", kn.Line)
			continue
		}
		f, ok := fieldNamed(v.Type(), key)
		if !ok {
			d.unknownKey(p, key, v.Type(), kn, n.Content[i+1])
			continue
		}
		d.value(p, v.FieldByIndex(f.index), n.Content[i+1])
	}
}

// unknownKey reports key, which the section t at path does not have. Inside a driver's
// section, a key that other driver types have is named as theirs; a section of theirs
// is reported key by key.
func (d *decoder) unknownKey(p, key string, t reflect.Type, kn, vn *yaml.Node) {
	types := d.otherTypes(p)
	if len(types) == 0 {
		d.ps.add(p, "unknown key%s (line %d)", didYouMean(key, t), kn.Line)
		return
	}
	if vn = d.deref(p, vn); vn != nil && vn.Kind == yaml.MappingNode && len(vn.Content) > 0 {
		for i := 0; i+1 < len(vn.Content); i += 2 {
			if k := vn.Content[i]; k.Kind == yaml.ScalarNode {
				d.unknownKey(join(p, k.Value), k.Value, nil, k, vn.Content[i+1])
			}
		}
		return
	}
	d.ps.add(p, "%s (line %d)", onlyText(types), kn.Line)
}

// otherTypes lists the driver types, other than the one being decoded, whose options
// have the key (or section) at path; none outside a driver's section.
func (d *decoder) otherTypes(path string) []string {
	if d.driver == nil || !strings.HasPrefix(path, d.driver.path+".") {
		return nil
	}
	rel := strings.Split(path[len(d.driver.path)+1:], ".")
	var types []string
	for _, r := range d.registry {
		if r.Type != d.driver.typ && hasKey(reflect.TypeOf(r.Options()), rel) {
			types = append(types, r.Type)
		}
	}
	return types
}

// hasKey reports whether the section struct t has the key at the path rel.
func hasKey(t reflect.Type, rel []string) bool {
	f, ok := fieldNamed(t, rel[0])
	switch {
	case !ok:
		return false
	case len(rel) == 1:
		return true
	case f.kind == kindStruct:
		return hasKey(f.typ, rel[1:])
	}
	return false
}

// driverSection decodes a driver's section: its type first, since the options the
// other keys are decoded into depend on it. A type set in the environment wins, as
// for every other key. The rest is left alone while the type is unknown.
func (d *decoder) driverSection(path string, v reflect.Value, n *yaml.Node) {
	typed := &yaml.Node{Kind: yaml.MappingNode, Line: n.Line}
	rest := &yaml.Node{Kind: yaml.MappingNode, Line: n.Line}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "type" {
			typed.Content = append(typed.Content, k, n.Content[i+1])
		} else {
			rest.Content = append(rest.Content, k, n.Content[i+1])
		}
	}
	d.pairs(path, v, typed)
	drv := v.Addr().Interface().(*Driver)
	if t, ok := d.envTypes[strings.TrimPrefix(path, "drivers.")]; ok {
		drv.Type = t
	}
	if !d.withOptions(drv) {
		return
	}
	o := reflect.New(reflect.TypeOf(drv.Options)).Elem()
	o.Set(reflect.ValueOf(drv.Options))
	d.driver = &driverAt{path: path, typ: drv.Type}
	d.pairs(path, o, rest)
	d.driver = nil
	drv.Options = o.Interface().(router.Options)
}

// withOptions gives drv the defaults of its type unless it holds options of that type
// already, and reports whether the type is registered.
func (d *decoder) withOptions(drv *Driver) bool {
	reg, ok := d.registry.Lookup(drv.Type)
	if !ok {
		drv.Options = nil
		return false
	}
	if def := reg.Options(); drv.Options == nil || reflect.TypeOf(drv.Options) != reflect.TypeOf(def) {
		drv.Options = def
	}
	return true
}

func didYouMean(key string, t reflect.Type) string {
	if t == nil {
		return ""
	}
	var names []string
	for _, f := range fieldsOf(t) {
		names = append(names, f.name)
	}
	if s := suggest(key, names); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

// Scalar sources differ in small ways: the environment has no YAML tags and also
// spells booleans 1 and 0.
const envTag = "env"

// setScalar parses raw into the leaf v of kind k and returns a problem, or "". tag is
// the YAML tag of the node, or envTag. Messages quote raw except for secrets, and
// strings and secrets accept anything, so no secret is ever quoted.
func setScalar(v reflect.Value, k kind, raw, tag string) string {
	got := func() string { return "got " + quoteShort(raw) }
	switch k {
	case kindString, kindSecret:
		v.SetString(raw)
	case kindInt:
		i, err := strconv.ParseInt(strings.TrimSpace(raw), 10, strconv.IntSize)
		if err != nil || tag == "!!float" || tag == "!!bool" {
			return "want an integer, " + got()
		}
		v.SetInt(i)
	case kindFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || tag == "!!bool" {
			return "want a number, " + got()
		}
		v.SetFloat(f)
	case kindBool:
		switch s := strings.ToLower(strings.TrimSpace(raw)); {
		case s == "true" || (tag == envTag && s == "1"):
			v.SetBool(true)
		case s == "false" || (tag == envTag && s == "0"):
			v.SetBool(false)
		case tag == envTag:
			return "want true, false, 1 or 0, " + got()
		default:
			return "want true or false, " + got()
		}
	case kindDuration:
		s := strings.TrimSpace(raw)
		if tag == "!!int" || tag == "!!float" {
			// A bare number has no unit; only 0 is unambiguous, as in time.ParseDuration.
			if f, err := strconv.ParseFloat(s, 64); err == nil && f == 0 {
				v.SetInt(0)
				return ""
			}
			return "want a duration such as 500ms or 30s, got " + s
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			return "want a duration such as 500ms or 30s, " + got()
		}
		v.SetInt(int64(dur))
	case kindList: // only from the environment: comma-separated
		list := []string{}
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
	default:
		return "want " + k.want()
	}
	return ""
}

// quoteShort quotes a non-secret value for a message, cut to a readable length.
func quoteShort(s string) string { return driveropt.Quote(s) }
