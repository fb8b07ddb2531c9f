package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load as a file. Load must not panic; every problem
// must name a key; and a configuration it accepts must print as YAML that loads back to
// the same configuration (when it holds no secret, since YAML() redacts those).
func FuzzLoad(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte(secretFile))
	f.Add([]byte("schema: \"x; drop table y\"\nstreams:\n  orders: {driver: bus, batch_size: 0, poll_interval: 5}\n"))
	f.Add([]byte("drivers:\n  a: &k {type: kafka, brokers: [k:9092]}\n  b: *k\nstreams:\n  s: {driver: a, dead_letter: {driver: b, topic: d}}\n"))
	f.Add([]byte("drivers:\n  n: {type: jetstream, url: 'nats://u:p@h:1,h2:2', max_in_flight: 7, tls: {enabled: true}}\n"))
	f.Add([]byte("janitor: {retention: 0, partitions: {enabled: true, interval: 1h}}\ntracing: {enabled: true, endpoint: 'http://c:4318', sample_ratio: 0.5}\n"))
	f.Add([]byte("database_url: host=db password='a\\'b' user=u\nhttp: {addr: ':0'}\n"))
	f.Add([]byte("- a\n---\nb: c\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("log: {level: debug, level: info}\n<<: {x: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "fuzz.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, nil, registry)
		if err != nil {
			var ps *Problems
			if !errors.As(err, &ps) || len(ps.List) == 0 {
				t.Fatalf("error is not a non-empty *Problems: %v", err)
			}
			if cfg != nil {
				t.Fatal("Load returned a config with its problems")
			}
			for _, p := range ps.List {
				if p.Key == "" || p.Msg == "" {
					t.Fatalf("problem without key or message: %+v", p)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Load accepted a config that Validate rejects: %v", err)
		}
		out := cfg.YAML()
		if hasSecret(cfg) {
			return
		}
		again, err := Load(writeFile(t, string(out)), nil, registry)
		if err != nil {
			t.Fatalf("YAML() of an accepted config does not load: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("YAML() does not load back to the same config:\n%+v\n%+v\n%s", again, cfg, out)
		}
	})
}

// hasSecret reports whether anything in c would be redacted.
func hasSecret(c *Config) bool {
	return !reflect.DeepEqual(c.Redacted(), *c) || strings.Contains(c.DatabaseURL, "[REDACTED]")
}
