package natsconn

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// DefaultPublishTimeout is how long a publish waits for the server when the options
// leave it zero.
const DefaultPublishTimeout = 5 * time.Second

// Options are the settings both NATS drivers share: where the servers are, how to
// authenticate, and how long a publish may take. The drivers embed them inline, so
// their keys sit directly in the driver's section.
type Options struct {
	// URL is a comma-separated server list.
	URL            string           `yaml:"url" redact:"urls"`
	Token          driveropt.Secret `yaml:"token"`
	Username       string           `yaml:"username"`
	Password       driveropt.Secret `yaml:"password"`
	CredsFile      string           `yaml:"creds_file"`
	PublishTimeout time.Duration    `yaml:"publish_timeout"`
	TLS            driveropt.TLS    `yaml:"tls"`
}

// DefaultOptions returns the documented defaults; there is no default server.
func DefaultOptions() Options { return Options{PublishTimeout: DefaultPublishTimeout} }

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	o.Check(&c)
	return c.Problems
}

// Check records every problem with the options in c.
func (o Options) Check(c *driveropt.Checker) {
	o.TLS.Check(c, "tls")
	if c.Required("url", o.URL) && !c.Placeholder("url", o.URL) {
		for i, raw := range strings.Split(o.URL, ",") {
			if msg := urlProblem(strings.TrimSpace(raw)); msg != "" {
				c.Add("url", "server %d (%s): %s", i+1, driveropt.Quote(driveropt.RedactURL(strings.TrimSpace(raw), driveropt.Mask, true)), msg)
			}
		}
	}
	c.Secret("token", o.Token)
	c.Secret("password", o.Password)
	if (o.Username == "") != (o.Password == "") {
		c.Add("username", "username and password go together; set both or neither")
	}
	methods := 0
	for _, set := range []bool{o.Token != "", o.Username != "" || o.Password != "", o.CredsFile != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		c.Add("token", "choose one way to authenticate: token, username and password, or creds_file")
	}
	c.Positive("publish_timeout", o.PublishTimeout)
}

// urlProblem says what is wrong with one server of the list, without quoting it.
func urlProblem(s string) string {
	if s == "" {
		return "empty; separate servers with single commas"
	}
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return driveropt.URLParseProblem(s, true)
	}
	if !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) {
		return "want scheme nats, tls, ws or wss"
	}
	if u.Host == "" {
		return "no host"
	}
	return ""
}

// Summary names the servers and the ways of authenticating that are set.
func (o Options) Summary() router.Summary {
	s := router.Summary{TLS: o.TLS.Enabled}
	if o.URL != "" {
		s.Servers = strings.Split(o.URL, ",")
	}
	if o.Token != "" {
		s.Auth = append(s.Auth, "token")
	}
	if o.Username != "" || o.Password != "" {
		s.Auth = append(s.Auth, "user/password")
	}
	if o.CredsFile != "" {
		s.Auth = append(s.Auth, "creds_file")
	}
	return s
}

// CheckPrefix accepts any prefix.
func (o Options) CheckPrefix(string, string) string { return "" }

// PrefixWildcards is true: NATS consumers take a stream's subjects by "<prefix>>".
func (o Options) PrefixWildcards() bool { return true }
