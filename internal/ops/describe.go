package ops

import (
	"sort"
	"strings"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// Stream is a configured stream and the driver it publishes through.
type Stream struct {
	Name   string
	Driver string
	// Ordered streams deliver each key's messages in order; stats adds their blocked keys.
	Ordered bool
}

// Driver describes a configured broker connection without any credential: its
// addresses lose their user information and query, and of its authentication only the
// kind is named (sasl/plain, token, user/password, creds_file), never a value.
type Driver struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	Addresses []string `json:"addresses"`
	TLS       bool     `json:"tls"`
	Auth      string   `json:"auth"`
}

// Describe lists the configured streams and drivers, each in name order, with every
// credential stripped.
func Describe(cfg *config.Config) ([]Stream, []Driver) {
	streams := make([]Stream, 0, len(cfg.Streams))
	for name, s := range cfg.Streams {
		streams = append(streams, Stream{Name: name, Driver: s.Driver, Ordered: s.Ordered})
	}
	sort.Slice(streams, func(i, j int) bool { return streams[i].Name < streams[j].Name })

	drivers := make([]Driver, 0, len(cfg.Drivers))
	for name, d := range cfg.Drivers {
		drivers = append(drivers, describeDriver(name, d))
	}
	sort.Slice(drivers, func(i, j int) bool { return drivers[i].Name < drivers[j].Name })
	return streams, drivers
}

func describeDriver(name string, d config.Driver) Driver {
	out := Driver{Name: name, Type: d.Type, Addresses: []string{}}
	var sum router.Summary
	if s, ok := d.Options.(router.Summarizer); ok {
		sum = s.Summary()
	}
	out.TLS = sum.TLS
	raw, auth := sum.Servers, append([]string(nil), sum.Auth...)
	for _, a := range raw {
		addr, hadUser := stripCredentials(strings.TrimSpace(a))
		if hadUser {
			auth = append(auth, "url credentials")
		}
		if addr != "" {
			out.Addresses = append(out.Addresses, addr)
		}
		if strings.HasPrefix(strings.ToLower(addr), "tls://") {
			out.TLS = true
		}
	}
	out.Auth = "none"
	if len(auth) > 0 {
		out.Auth = strings.Join(dedupe(auth), ", ")
	}
	return out
}

// stripCredentials removes the user information (everything up to the last '@' of the
// authority, as a careless password may itself hold '@', '/', '?' or '#'), the query
// and the fragment from an address, URL or bare host:port alike. It reports whether
// user information was removed.
func stripCredentials(addr string) (string, bool) {
	scheme, rest := "", addr
	if i := strings.Index(addr, "://"); i >= 0 {
		scheme, rest = addr[:i+3], addr[i+3:]
	}
	hadUser := false
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest, hadUser = rest[at+1:], true
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + rest, hadUser
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
