package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/router/nats"
)

// registry is the driver types outboxd is built with.
var registry = drivers.All()

// driverOf returns a driver of the registered type typ with its defaults, edited by f.
func driverOf[O router.Options](typ string, f func(*O)) Driver {
	reg, ok := registry.Lookup(typ)
	if !ok {
		panic("no driver type " + typ)
	}
	o := reg.Options().(O)
	if f != nil {
		f(&o)
	}
	return Driver{Type: typ, Options: o}
}

func kafkaDriver(f func(*kafka.Options)) Driver         { return driverOf(kafka.Type, f) }
func natsDriver(f func(*nats.Options)) Driver           { return driverOf(nats.Type, f) }
func jetstreamDriver(f func(*jetstream.Options)) Driver { return driverOf(jetstream.Type, f) }

// editOptions changes the options of the driver called name.
func editOptions[O router.Options](c *Config, name string, f func(*O)) {
	d := c.Drivers[name]
	o := d.Options.(O)
	f(&o)
	d.Options = o
	c.Drivers[name] = d
}

// writeFile writes a configuration file for one test and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outboxd.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustLoad loads a file (none if content is "") and environment that must be valid.
func mustLoad(t *testing.T, content string, environ ...string) *Config {
	t.Helper()
	path := ""
	if content != "" {
		path = writeFile(t, content)
	}
	cfg, err := Load(path, environ, registry)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg == nil {
		t.Fatal("Load returned neither a config nor an error")
	}
	return cfg
}

// loadProblems loads a file and environment that must be invalid and returns the
// problems.
func loadProblems(t *testing.T, content string, environ ...string) *Problems {
	t.Helper()
	path := ""
	if content != "" {
		path = writeFile(t, content)
	}
	cfg, err := Load(path, environ, registry)
	if err == nil {
		t.Fatalf("Load succeeded, want problems; effective config:\n%s", cfg.YAML())
	}
	if cfg != nil {
		t.Errorf("Load returned a config along with its error")
	}
	return asProblems(t, err)
}

func asProblems(t *testing.T, err error) *Problems {
	t.Helper()
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %T is not *Problems: %v", err, err)
	}
	if len(ps.List) == 0 {
		t.Fatal("*Problems with an empty list")
	}
	return ps
}

// wantKeys fails unless the problems are on exactly the given keys.
func wantKeys(t *testing.T, ps *Problems, keys ...string) {
	t.Helper()
	slices.Sort(keys)
	if got := ps.Keys(); !slices.Equal(got, keys) {
		t.Errorf("problem keys = %q, want %q\n%v", got, keys, ps)
	}
}

// validConfig is a small configuration that passes Validate, to be broken one way per
// test case.
func validConfig() Config {
	c := Default()
	bus := kafkaDriver(func(o *kafka.Options) { o.Brokers = []string{"k1:9092", "k2:9092"} })
	events := natsDriver(func(o *nats.Options) { o.URL = "nats://n1:4222,nats://n2:4222" })
	js := jetstreamDriver(func(o *jetstream.Options) { o.URL = "nats://n1:4222" })
	c.Drivers = map[string]Driver{"bus": bus, "events": events, "js": js}
	orders := DefaultStream()
	orders.Driver = "bus"
	c.Streams = map[string]Stream{"orders": orders}
	return c
}

// optionsOf returns the options of the driver called name.
func optionsOf[O router.Options](c *Config, name string) O {
	o, _ := c.Drivers[name].Options.(O)
	return o
}
