package rabbitmq

import (
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "rabbitmq"

const (
	// DefaultPublishTimeout bounds one Publish when the options leave it zero.
	DefaultPublishTimeout = 5 * time.Second
	// DefaultMaxMessageBytes is RabbitMQ's own default max_message_size (128 MiB).
	DefaultMaxMessageBytes = 128 << 20
	// maxMessageBytesCeiling is the largest max_message_size RabbitMQ accepts (512 MiB).
	maxMessageBytesCeiling = 512 << 20
	// maxShortString is the longest AMQP short string: exchange names, routing keys,
	// header names and most message properties are short strings.
	maxShortString = 255
)

// Options configure the RabbitMQ driver.
type Options struct {
	// URL is one amqp:// or amqps:// URL; its user info, if any, is the default
	// credential and is redacted in all output.
	URL string `yaml:"url" redact:"urls"`
	// Username and Password, when set, replace the URL's credentials.
	Username string           `yaml:"username"`
	Password driveropt.Secret `yaml:"password"`
	// Vhost, when set, replaces the URL's virtual host.
	Vhost string `yaml:"vhost"`
	// Exchange every message is published to, with the row's topic as routing key.
	// "" is the default exchange, which routes a message to the queue named by its
	// routing key.
	Exchange        string        `yaml:"exchange"`
	PublishTimeout  time.Duration `yaml:"publish_timeout"`
	MaxMessageBytes int           `yaml:"max_message_bytes"`
	TLS             driveropt.TLS `yaml:"tls"`
}

// DefaultOptions returns the documented defaults; there is no default server.
func DefaultOptions() Options {
	return Options{PublishTimeout: DefaultPublishTimeout, MaxMessageBytes: DefaultMaxMessageBytes}
}

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	o.TLS.Check(&c, "tls")
	if c.Required("url", o.URL) && !c.Placeholder("url", o.URL) {
		if msg := urlProblem(o.URL); msg != "" {
			c.Add("url", "%s: %s", driveropt.Quote(driveropt.RedactURL(o.URL, driveropt.Mask, false)), msg)
		} else if o.TLS.Enabled && !strings.HasPrefix(strings.ToLower(o.URL), "amqps://") {
			c.Add("tls.enabled", "TLS needs an amqps:// url")
		}
	}
	c.Secret("password", o.Password)
	if (o.Username == "") != (o.Password == "") {
		c.Add("username", "username and password go together; set both or neither")
	}
	if msg := nameProblem(o.Vhost); msg != "" {
		c.Add("vhost", "%s", msg)
	}
	if msg := nameProblem(o.Exchange); msg != "" {
		c.Add("exchange", "%s", msg)
	}
	c.Positive("publish_timeout", o.PublishTimeout)
	c.IntRange("max_message_bytes", o.MaxMessageBytes, 1, maxMessageBytesCeiling)
	return c.Problems
}

// urlProblem says what is wrong with an AMQP URL, without quoting it.
func urlProblem(s string) string {
	if strings.ContainsAny(s, " \t\r\n") {
		return "contains whitespace"
	}
	u, err := url.Parse(s)
	if err != nil {
		return driveropt.URLParseProblem(s, false)
	}
	switch {
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return "want scheme amqp or amqps"
	case u.Hostname() == "":
		return "no host"
	}
	if p := u.Port(); p != "" {
		if msg := driveropt.HostPortProblem("h:"+p, false); msg != "" {
			return msg
		}
	}
	return ""
}

// nameProblem says what keeps s from being an exchange or vhost name, or "".
func nameProblem(s string) string {
	switch {
	case len(s) > maxShortString:
		return "at most 255 bytes"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	return ""
}

// Summary names the server, whether TLS is used and how the driver authenticates.
func (o Options) Summary() router.Summary {
	s := router.Summary{TLS: o.TLS.Enabled || strings.HasPrefix(strings.ToLower(o.URL), "amqps://")}
	if o.URL != "" {
		s.Servers = []string{o.URL}
	}
	if o.Username != "" {
		s.Auth = []string{"user/password"}
	}
	return s
}
