package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
)

// Load builds the configuration: Default, overlaid by the YAML file at path (none when
// path is ""), overlaid by the OUTBOXD_* variables in environ (as from os.Environ), then
// validated. On failure it returns a *Problems with everything found: unreadable or
// malformed file, unknown keys and variables, values of the wrong type, and every
// Validate problem. A key whose value did not parse, or whose section did not, is not
// validated again.
func Load(path string, environ []string) (*Config, error) {
	cfg := Default()
	d := newDecoder()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			d.ps.add(FileKey, "cannot read: %v", err)
		} else {
			d.file(&cfg, data)
		}
	}
	d.env(&cfg, environ)
	d.driverDefaults(&cfg)

	failed := map[string]bool{}
	for _, p := range d.ps.list {
		failed[p.Key] = true
	}
	var ps *Problems
	if err := cfg.Validate(); errors.As(err, &ps) {
		for _, p := range ps.List {
			if underFailed(p.Key, failed) {
				continue
			}
			if o := d.origin[p.Key]; o != "" {
				p.Msg += " (" + o + ")"
			}
			d.ps.list = append(d.ps.list, p)
		}
	}
	if err := d.ps.err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// underFailed reports whether key, or a section or entry holding it, already has a
// problem from decoding; validating the default left in its place would only add noise.
func underFailed(key string, failed map[string]bool) bool {
	for k := key; ; {
		if failed[k] {
			return true
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			return false
		}
		k = k[:i]
	}
}

// driverDefaults fills each driver's type-specific defaults into the fields neither the
// file nor the environment set (the type may come from one and the fields from the
// other, so this waits until both are applied). A field explicitly set, even to its
// zero value, on a driver of another type is a problem; Validate catches non-zero ones.
func (d *decoder) driverDefaults(cfg *Config) {
	for name, drv := range cfg.Drivers {
		if !knownType(drv.Type) {
			continue
		}
		prefix := join("drivers", name)
		def := reflect.ValueOf(DefaultDriver(drv.Type))
		v := reflect.ValueOf(&drv).Elem()
		eachLeaf(v, prefix, nil, func(path string, leaf reflect.Value, f field, only []string) {
			_, set := d.origin[path]
			switch {
			case set && !allows(only, drv.Type) && leaf.IsZero():
				d.ps.add(path, "%s (%s)", onlyText(only), d.origin[path])
			case !set:
				if dv := fieldAt(def, path[len(prefix)+1:]); !dv.IsZero() {
					leaf.Set(dv)
				}
			}
		})
		cfg.Drivers[name] = drv
	}
}

// fieldAt finds the leaf at a dotted path below the struct v.
func fieldAt(v reflect.Value, path string) reflect.Value {
	for key := range strings.SplitSeq(path, ".") {
		f, _ := fieldNamed(v.Type(), key)
		v = v.Field(f.index)
	}
	return v
}
