package config

import (
	"reflect"
	"strings"
)

// testEnvPrefix is left to the test harness: such variables are never settings.
const testEnvPrefix = "OUTBOXD_TEST_"

// env overlays OUTBOXD_* variables onto cfg. The name of a setting is OUTBOXD_ and its
// path upper-cased with "__" between segments; map entry names are lower-cased.
func (d *decoder) env(cfg *Config, environ []string) {
	root := reflect.ValueOf(cfg).Elem()
	seen := map[string]bool{}
	var unknown []string
	for _, kv := range environ {
		name, raw, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, envPrefix) || name == FileEnv || strings.HasPrefix(name, testEnvPrefix) {
			continue
		}
		if seen[name] {
			continue // the first occurrence wins, as with os.Getenv
		}
		seen[name] = true
		if !d.envSet(root, strings.TrimPrefix(name, envPrefix), "", name, raw) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return
	}
	// Suggest against the names that exist once every variable has been applied, so
	// that a stream created by one variable helps spot a typo in another.
	candidates := d.envNames(root)
	for _, name := range unknown {
		path := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "__", "."))
		hint := ""
		if s := suggest(strings.ToUpper(name), candidates); s != "" {
			hint = "; did you mean " + s + "?"
		}
		d.ps.add(name, "unknown environment variable (no key %s)%s", path, hint)
	}
}

// envSet applies one variable whose name, after the prefix and the segments matched so
// far, is rest. It reports whether rest names a setting; a value that does not parse is
// still a match (and a problem).
func (d *decoder) envSet(v reflect.Value, rest, path, name, raw string) bool {
	if v.Kind() == reflect.Map {
		return d.envSetEntry(v, rest, path, name, raw)
	}
	for _, f := range fieldsOf(v.Type()) {
		fv, p := v.FieldByIndex(f.index), join(path, f.name)
		if f.kind == kindOptions {
			if d.envSetOptions(v, fv, rest, path, name, raw) {
				return true
			}
			continue
		}
		if f.kind == kindEntries {
			if rest == f.env || strings.HasPrefix(rest, f.env+"__") {
				d.ps.add(name, "%s is set in the configuration file only: a list has no environment names", f.name)
				return true
			}
			continue
		}
		if f.kind == kindStruct || f.kind == kindMap {
			if tail, ok := strings.CutPrefix(rest, f.env+"__"); ok && d.envSet(fv, tail, p, name, raw) {
				return true
			}
			continue
		}
		if rest != f.env {
			continue
		}
		if msg := setScalar(fv, f.kind, raw, envTag); msg != "" {
			d.ps.add(p, "%s (from %s)", msg, name)
		} else {
			d.origin[p] = "from " + name
		}
		return true
	}
	return false
}

// envSetOptions applies a variable to the options of the driver drv, whose field
// Options is fv. A key that only other driver types have is a problem named as theirs.
func (d *decoder) envSetOptions(drv, fv reflect.Value, rest, path, name, raw string) bool {
	typ := drv.Interface().(Driver).Type
	if t, ok := d.envTypes[strings.TrimPrefix(path, "drivers.")]; ok {
		typ = t
	}
	reg, ok := d.registry.Lookup(typ)
	if !ok {
		return false
	}
	o := reflect.New(reflect.TypeOf(reg.Options())).Elem()
	if fv.IsNil() || fv.Elem().Type() != o.Type() {
		o.Set(reflect.ValueOf(reg.Options()))
	} else {
		o.Set(fv.Elem())
	}
	if d.envSet(o, rest, path, name, raw) {
		fv.Set(o)
		return true
	}
	var types []string
	var key string
	for _, r := range d.registry {
		if r.Type == typ {
			continue
		}
		for _, k := range optionKeys(reflect.TypeOf(r.Options()), "") {
			if strings.ToUpper(strings.ReplaceAll(k, ".", "__")) == rest {
				types, key = append(types, r.Type), k
			}
		}
	}
	if len(types) == 0 {
		return false
	}
	d.ps.add(join(path, key), "%s (from %s)", onlyText(types), name)
	return true
}

// envDriverTypes finds the driver types the environment sets
// (OUTBOXD_DRIVERS__<NAME>__TYPE), by driver name; the first occurrence wins.
func envDriverTypes(environ []string) map[string]string {
	types := map[string]string{}
	for _, kv := range environ {
		name, raw, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		entry, isDriver := strings.CutPrefix(name, envPrefix+"DRIVERS__")
		entry, isType := strings.CutSuffix(entry, "__TYPE")
		if !isDriver || !isType || entry == "" {
			continue
		}
		if _, seen := types[strings.ToLower(entry)]; !seen {
			types[strings.ToLower(entry)] = raw
		}
	}
	return types
}

// envSetEntry applies a variable inside a map. The entry name runs up to a "__"; names
// may hold single underscores and end in one, so every split point is tried in turn.
func (d *decoder) envSetEntry(v reflect.Value, rest, path, name, raw string) bool {
	for i := 0; i < len(rest); {
		at := strings.Index(rest[i:], "__")
		if at < 0 {
			return false
		}
		at += i
		i = at + 1
		entry := strings.ToLower(rest[:at])
		if entry == "" {
			continue
		}
		key := reflect.ValueOf(entry)
		elem := newEntry(v.Type().Elem())
		if old := v.MapIndex(key); old.IsValid() {
			elem.Set(old)
		}
		p := join(path, entry)
		if !d.envSet(elem, rest[at+2:], p, name, raw) {
			continue
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		v.SetMapIndex(key, elem)
		if _, ok := d.origin[p]; !ok {
			d.origin[p] = "from " + name
		}
		return true
	}
	return false
}

// envNames lists the variable of every leaf setting that exists in v, map entries
// included, for suggestions.
func (d *decoder) envNames(v reflect.Value) []string {
	var names []string
	eachLeaf(v, "", func(path string, _ reflect.Value, _ field) {
		names = append(names, envFor(path))
	})
	for _, k := range knownKeys(d.registry) {
		if !strings.Contains(k.path, "<name>") || k.env == fileOnly {
			continue
		}
		names = append(names, k.env)
	}
	return names
}
