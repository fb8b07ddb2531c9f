package config_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/router/drivers"
)

// postcard is a destination defined outside router, to show what adding one takes: a
// package of its own (options, their checks, a constructor) and one registration line.
// Nothing in config, router or dispatch names it.
type postcardOptions struct {
	Address string           `yaml:"address"`
	Stamps  int              `yaml:"stamps"`
	Token   driveropt.Secret `yaml:"token"`
}

func (o postcardOptions) Validate() []driveropt.Problem {
	var c driveropt.Checker
	c.Required("address", o.Address)
	c.IntRange("stamps", o.Stamps, 1, 10)
	c.Secret("token", o.Token)
	return c.Problems
}

type postcard struct {
	name string
	opts postcardOptions
	sent int
}

func (p *postcard) Publish(_ context.Context, msgs []router.Message) []error {
	p.sent += len(msgs)
	return make([]error, len(msgs))
}

func (p *postcard) Close() error { return nil }

func newPostcard(name string, o postcardOptions, _ *slog.Logger) (*postcard, error) {
	if o.Address == "" {
		return nil, errors.New("postcard: no address")
	}
	return &postcard{name: name, opts: o}, nil
}

// withPostcard is outboxd's list of drivers plus the one registration line.
var withPostcard = append(drivers.All(),
	router.Register("postcard", func() postcardOptions { return postcardOptions{Stamps: 1} }, newPostcard))

func load(t *testing.T, reg router.Registry, yaml string, environ ...string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outboxd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return config.Load(path, environ, reg)
}

// postcardYAML ends inside the driver's section, so a case can add a key to it.
const postcardYAML = `
streams:
  orders:
    driver: mail
drivers:
  mail:
    type: postcard
    address: 1 Main Street
    token: s3cret-stamp
`

func TestADriverRegisteredOutsideRouterIsConfiguredAndBuilt(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, withPostcard, postcardYAML, "OUTBOXD_DRIVERS__MAIL__STAMPS=3")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	d := cfg.Drivers["mail"]
	want := postcardOptions{Address: "1 Main Street", Stamps: 3, Token: "s3cret-stamp"}
	if got, ok := d.Options.(postcardOptions); !ok || got != want {
		t.Fatalf("options = %#v, want %#v", d.Options, want)
	}
	drv, err := withPostcard.Build("mail", d.Type, d.Options, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	p, ok := drv.(*postcard)
	if !ok || p.name != "mail" || p.opts != want {
		t.Fatalf("built %#v, want a postcard driver called mail with %#v", drv, want)
	}
	if errs := p.Publish(context.Background(), make([]router.Message, 2)); len(errs) != 2 || p.sent != 2 {
		t.Fatalf("Publish = %v, sent %d", errs, p.sent)
	}
	if out := string(cfg.YAML()); !strings.Contains(out, "address: 1 Main Street") || !strings.Contains(out, "stamps: 3") ||
		strings.Contains(out, "s3cret-stamp") {
		t.Errorf("YAML() does not show the options with the token redacted:\n%s", out)
	}
}

func TestADriverRegisteredOutsideRouterHasItsKeysChecked(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		reg     router.Registry
		yaml    string
		problem string
	}{
		{"An unknown key names the key and the driver.", withPostcard, postcardYAML + "    stamp: 2\n",
			"drivers.mail.stamp: unknown key; did you mean stamps?"},
		{"A key of another driver type is named as theirs.", withPostcard, postcardYAML + "    brokers: [k:9092]\n",
			"drivers.mail.brokers: only valid for type kafka"},
		{"Its own checks run.", withPostcard, postcardYAML + "    stamps: 11\n",
			"drivers.mail.stamps: must be between 1 and 10, got 11"},
		{"Without its registration the type is unknown.", drivers.All(), postcardYAML,
			"drivers.mail.type: want one of " + strings.Join(drivers.All().Types(), ", ") + `; got "postcard"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tc.reg, tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("Load error = %v, want it to report %q", err, tc.problem)
			}
		})
	}
}
