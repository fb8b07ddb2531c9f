package router

import (
	"fmt"
	"log/slog"

	"github.com/outboxd/outboxd/router/driveropt"
)

// Options are one driver's settings, decoded from its section of the configuration: a
// struct value (not a pointer) whose yaml tags name the keys, ",inline" on an embedded
// struct shares keys between drivers, and a "redact" tag of "urls" marks a
// comma-separated URL list that may hold credentials. Secrets are driveropt.Secret.
type Options interface {
	// Validate returns every problem, keyed by the path inside the driver's section.
	Validate() []driveropt.Problem
}

// Registration makes a driver type known: the configuration decodes a section whose
// type is Type into a copy of Options(), and the composition root builds the driver
// with New. Adding a destination means a package with its options and driver, and one
// Registration in the list outboxd is built with (router/drivers).
type Registration struct {
	Type string
	// Options returns the type's options holding their documented defaults.
	Options func() Options
	// New builds the driver called name from options Options returned, decoded.
	New func(name string, o Options, logger *slog.Logger) (Driver, error)
}

// Register ties a driver type to its defaults and constructor, typed.
func Register[O Options, D Driver](typ string, defaults func() O, newDriver func(string, O, *slog.Logger) (D, error)) Registration {
	return Registration{
		Type:    typ,
		Options: func() Options { return defaults() },
		New: func(name string, o Options, logger *slog.Logger) (Driver, error) {
			opts, ok := o.(O)
			if !ok {
				return nil, fmt.Errorf("driver %s: %s options given to the %s driver", name, typeName(o), typ)
			}
			d, err := newDriver(name, opts, logger)
			if err != nil {
				return nil, err // never a typed nil in the interface
			}
			return d, nil
		},
	}
}

func typeName(v any) string {
	if v == nil {
		return "no"
	}
	return fmt.Sprintf("%T", v)
}

// Registry is the list of driver types a build of outboxd knows.
type Registry []Registration

// Lookup finds the registration of typ.
func (r Registry) Lookup(typ string) (Registration, bool) {
	for _, reg := range r {
		if reg.Type == typ {
			return reg, true
		}
	}
	return Registration{}, false
}

// Types lists the registered types in registration order.
func (r Registry) Types() []string {
	types := make([]string, len(r))
	for i, reg := range r {
		types[i] = reg.Type
	}
	return types
}

// Build builds the driver called name of type typ from its options.
func (r Registry) Build(name, typ string, o Options, logger *slog.Logger) (Driver, error) {
	reg, ok := r.Lookup(typ)
	if !ok {
		return nil, fmt.Errorf("drivers.%s.type: unknown driver type %q", name, typ)
	}
	return reg.New(name, o, logger)
}

// Summary is what an operator may be shown of a driver's options.
type Summary struct {
	// Servers are the addresses as configured; they may hold credentials, so strip
	// those before showing them.
	Servers []string
	TLS     bool
	// Auth names the ways of authenticating that are set ("token", "sasl/plain").
	Auth []string
	// Provision is whether the driver creates a destination that is missing.
	Provision bool
}

// Summarizer is implemented by Options that have servers, credentials or provisioning
// worth showing; other drivers show their type only.
type Summarizer interface {
	Summary() Summary
}

// RouteRules is implemented by Options whose driver constrains the streams routed to
// it; the configuration checks every stream against its driver's rules.
type RouteRules interface {
	// CheckPrefix returns what is wrong with topicPrefix for a stream routed to the
	// driver called driver, or "".
	CheckPrefix(driver, topicPrefix string) string
	// PrefixWildcards reports whether consumers take a stream's messages by a wildcard
	// on its topic prefix (NATS subjects), so that a dead-letter topic under the prefix
	// of a stream on the same driver would reach them as an ordinary message.
	PrefixWildcards() bool
}
