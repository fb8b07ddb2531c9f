package webhook

import (
	"strings"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Type names the driver in a configuration (drivers.<name>.type).
const Type = "http"

// Options configure the HTTP driver.
type Options struct {
	// URL is the endpoint, a template in which every {topic} is replaced by the
	// message's topic, escaped (webhook.go). User information in it is sent as HTTP Basic
	// authentication and redacted wherever the URL is shown.
	URL string `yaml:"url" redact:"urls"`
	// Batch posts each batch as one JSON array per URL instead of one request per
	// message.
	Batch bool `yaml:"batch"`
	// Timeout bounds one request: connecting, sending, and the answer's status line and
	// headers.
	Timeout time.Duration `yaml:"timeout"`
	// MaxConcurrency bounds the requests one batch has in flight at once.
	MaxConcurrency  int `yaml:"max_concurrency"`
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	// Headers are added to every request, each written "Name: value". They are not
	// secrets: their values show in `outboxd config check`; summaries name them only.
	Headers []string `yaml:"headers"`
	// SigningSecret, when set, signs every request body with HMAC-SHA256 (sign.go).
	SigningSecret   driveropt.Secret `yaml:"signing_secret"`
	SignatureHeader string           `yaml:"signature_header"`
	// TLS applies to https URLs; an https URL without it trusts the system's roots.
	TLS driveropt.TLS `yaml:"tls"`
}

// Documented defaults.
const (
	defaultTimeout         = 10 * time.Second
	defaultMaxConcurrency  = 16
	defaultMaxPayloadBytes = 1 << 20
	// DefaultSignatureHeader names the header that carries the signature.
	DefaultSignatureHeader = "Outbox-Signature"

	maxTimeout         = 10 * time.Minute
	maxMaxConcurrency  = 1024
	maxMaxPayloadBytes = 256 << 20
	// minSecretBytes keeps a signing key out of guessing range.
	minSecretBytes = 16
)

// DefaultOptions returns the documented defaults; there is no default URL.
func DefaultOptions() Options {
	return Options{
		Timeout:         defaultTimeout,
		MaxConcurrency:  defaultMaxConcurrency,
		MaxPayloadBytes: defaultMaxPayloadBytes,
		SignatureHeader: DefaultSignatureHeader,
	}
}

// Validate returns every problem with the options.
func (o Options) Validate() []driveropt.Problem {
	var c driveropt.Checker
	o.TLS.Check(&c, "tls")
	if c.Required("url", o.URL) && !c.Placeholder("url", o.URL) {
		if t, err := parseTemplate(o.URL); err != nil {
			c.Add("url", "%s", err)
		} else if o.TLS.Enabled && !t.https {
			c.Add("tls.enabled", "set, but the url is http://; tls.* applies to https URLs")
		}
	}
	c.DurRange("timeout", o.Timeout, time.Millisecond, maxTimeout)
	c.IntRange("max_concurrency", o.MaxConcurrency, 1, maxMaxConcurrency)
	c.IntRange("max_payload_bytes", o.MaxPayloadBytes, 1, maxMaxPayloadBytes)
	if _, problems := staticHeaders(o.Headers, o.SignatureHeader); len(problems) > 0 {
		for _, p := range problems {
			c.Add("headers", "%s", p)
		}
	}
	c.Secret("signing_secret", o.SigningSecret)
	if s := o.SigningSecret; s != "" && len(s.Reveal()) < minSecretBytes {
		c.Add("signing_secret", "must be at least %d characters long", minSecretBytes)
	}
	switch msg := signatureHeaderProblem(o.SignatureHeader); {
	case msg != "":
		c.Add("signature_header", "%s", msg)
	case o.SigningSecret == "" && o.SignatureHeader != DefaultSignatureHeader:
		c.Add("signature_header", "set, but signing_secret is not: nothing would be signed")
	}
	return c.Problems
}

// Summary names the endpoint, whether it is https, and what authenticates the requests:
// a signature and the static headers, by name only, since their values may be tokens.
func (o Options) Summary() router.Summary {
	s := router.Summary{TLS: strings.HasPrefix(strings.ToLower(o.URL), "https://")}
	if o.URL != "" {
		s.Servers = []string{o.URL}
	}
	if o.SigningSecret != "" {
		s.Auth = append(s.Auth, "hmac-sha256 signature")
	}
	for _, h := range o.Headers {
		if name, _, ok := strings.Cut(h, ":"); ok {
			s.Auth = append(s.Auth, "header "+strings.TrimSpace(name))
		}
	}
	return s
}
