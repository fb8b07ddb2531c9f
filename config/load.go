package config

import (
	"errors"
	"os"
	"reflect"
	"strings"

	"github.com/outboxd/outboxd/router"
)

// Load builds the configuration: Default, overlaid by the YAML file at path (none when
// path is ""), overlaid by the OUTBOXD_* variables in environ (as from os.Environ), then
// validated. On failure it returns a *Problems with everything found: unreadable or
// malformed file, unknown keys and variables, values of the wrong type, and every
// Validate problem. A key whose value did not parse, or whose section did not, is not
// validated again.
//
// drivers is the list of driver types this build knows (router/drivers.All): a
// drivers.<name>.type selects one, and the rest of that section is decoded into its
// options.
func Load(path string, environ []string, drivers router.Registry) (*Config, error) {
	cfg := Default()
	d := newDecoder(drivers, environ)
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			d.ps.add(FileKey, "cannot read: %v", err)
		} else {
			d.file(&cfg, data)
		}
	}
	d.env(&cfg, environ)
	d.resolveDrivers(&cfg)
	d.inheritOutboxes(&cfg)

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

// resolveDrivers gives every driver of a registered type its options (the defaults of
// its type when neither the file nor the environment set one of them) and reports
// every type that is not registered.
func (d *decoder) resolveDrivers(cfg *Config) {
	for name, drv := range cfg.Drivers {
		if !d.withOptions(&drv) && drv.Type != "" {
			p := join(join("drivers", name), "type")
			d.ps.add(p, "want one of %s; got %s (%s)", strings.Join(d.registry.Types(), ", "), quoteShort(drv.Type), d.origin[p])
		}
		cfg.Drivers[name] = drv
	}
}

// fieldAt finds the leaf at a dotted path below the struct v.
func fieldAt(v reflect.Value, path string) reflect.Value {
	for key := range strings.SplitSeq(path, ".") {
		f, _ := fieldNamed(v.Type(), key)
		v = v.FieldByIndex(f.index)
	}
	return v
}
