package webhook_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/router/webhook"
)

func TestValidateReportsEveryBadOptionClearly(t *testing.T) {
	t.Parallel()
	good := func() webhook.Options {
		o := webhook.DefaultOptions()
		o.URL = "https://hooks.example.com/events/{topic}"
		return o
	}
	cases := []struct {
		name string
		edit func(o *webhook.Options)
		key  string
		want string
	}{
		{"no url", func(o *webhook.Options) { o.URL = "" }, "url", "required"},
		{"a url copied from redacted output", func(o *webhook.Options) { o.URL = "https://u:[REDACTED]@h/x" }, "url",
			"holds the placeholder [REDACTED]"},
		{"a url of another scheme", func(o *webhook.Options) { o.URL = "ftp://h/{topic}" }, "url",
			`want an http:// or https:// URL, got scheme "ftp"`},
		{"a url without a scheme", func(o *webhook.Options) { o.URL = "hooks.example.com/{topic}" }, "url",
			"want an http:// or https:// URL"},
		{"a url without a host", func(o *webhook.Options) { o.URL = "https:///events/{topic}" }, "url", "no host"},
		{"a misspelt placeholder", func(o *webhook.Options) { o.URL = "https://h/events/{topics}" }, "url",
			`only {topic} is replaced in the url; found "{topics}"`},
		{"a placeholder of another kind", func(o *webhook.Options) { o.URL = "https://h/{stream}/{topic}" }, "url",
			`found "{stream}"`},
		{"a stray brace", func(o *webhook.Options) { o.URL = "https://h/events/topic}" }, "url", `found "}"`},
		{"the topic in the host", func(o *webhook.Options) { o.URL = "https://{topic}.example.com/in" }, "url",
			"{topic} may stand only in the path or the query"},
		{"a fragment", func(o *webhook.Options) { o.URL = "https://h/events/{topic}#x" }, "url", "a fragment (#…) is never sent"},
		{"a password that is not percent-encoded, not quoted", func(o *webhook.Options) { o.URL = "https://u:p%zzsecret@h/{topic}" },
			"url", "the user name or password is not percent-encoded correctly"},
		{"tls on an http url", func(o *webhook.Options) { o.URL = "http://h/{topic}"; o.TLS.Enabled = true }, "tls.enabled",
			"the url is http://"},
		{"a TLS file without tls.enabled", func(o *webhook.Options) { o.TLS.CAFile = "/ca.pem" }, "tls.ca_file",
			"set, but tls.enabled is false"},
		{"no timeout", func(o *webhook.Options) { o.Timeout = 0 }, "timeout", "must be between 1ms and 10m, got 0s"},
		{"a timeout of an hour", func(o *webhook.Options) { o.Timeout = time.Hour }, "timeout", "must be between 1ms and 10m, got 1h"},
		{"no concurrency", func(o *webhook.Options) { o.MaxConcurrency = 0 }, "max_concurrency", "must be between 1 and 1024, got 0"},
		{"too much concurrency", func(o *webhook.Options) { o.MaxConcurrency = 5000 }, "max_concurrency", "must be between 1 and 1024"},
		{"no payload allowed", func(o *webhook.Options) { o.MaxPayloadBytes = 0 }, "max_payload_bytes", "must be between 1 and 268435456"},
		{"a header without a colon", func(o *webhook.Options) { o.Headers = []string{"X-Team payments"} }, "headers",
			`item 1: want "Name: value", got no colon`},
		{"a header name with a space", func(o *webhook.Options) { o.Headers = []string{"X-A: 1", "X Team: payments"} }, "headers",
			`item 2: header name "X Team" holds ' '`},
		{"a header value with a line break", func(o *webhook.Options) { o.Headers = []string{"X-Team: a\nb"} }, "headers",
			`item 1: the value of X-Team holds '\n'`},
		{"a framing header", func(o *webhook.Options) { o.Headers = []string{"Content-Length: 3"} }, "headers",
			"Content-Length describes the connection"},
		{"a header the driver writes", func(o *webhook.Options) { o.Headers = []string{"outbox-id: 3"} }, "headers",
			"Outbox-Id is written by the driver for every message"},
		{"a static Content-Type", func(o *webhook.Options) { o.Headers = []string{"Content-Type: text/plain"} }, "headers",
			"Content-Type is written by the driver"},
		{"the signature header as a static header", func(o *webhook.Options) { o.Headers = []string{"Outbox-Signature: x"} }, "headers",
			"Outbox-Signature carries the signature"},
		{"a header set twice", func(o *webhook.Options) { o.Headers = []string{"X-Team: a", "x-team: b"} }, "headers",
			"item 2: X-Team is set twice"},
		{"a short signing secret", func(o *webhook.Options) { o.SigningSecret = "short-secret" }, "signing_secret",
			"must be at least 16 characters long"},
		{"a signing secret copied from redacted output", func(o *webhook.Options) { o.SigningSecret = "[REDACTED]" }, "signing_secret",
			"holds the placeholder [REDACTED], not a secret"},
		{"a signature header that is not a name", func(o *webhook.Options) { o.SignatureHeader = "X Sig" }, "signature_header",
			`header name "X Sig" holds ' '`},
		{"a signature header the driver writes", func(o *webhook.Options) {
			o.SignatureHeader, o.SigningSecret = "Outbox-Message-Id", "0123456789abcdef"
		}, "signature_header", "Outbox-Message-Id is a header the driver or net/http writes"},
		{"a signature header without a secret", func(o *webhook.Options) { o.SignatureHeader = "X-Signature" }, "signature_header",
			"set, but signing_secret is not"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := good()
			c.edit(&o)
			ps := o.Validate()
			var found bool
			for _, p := range ps {
				if strings.Contains(p.Msg, "zzsecret") {
					t.Fatalf("a problem quotes the password: %v", p)
				}
				if p.Key == c.key && strings.Contains(p.Msg, c.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("problems %v; want %s: %q", ps, c.key, c.want)
			}
			if _, err := webhook.New("hook", o, nil); err == nil {
				t.Fatal("New took options Validate refuses")
			}
		})
	}
}

func TestTheDefaultsWithAURLAreValid(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"https://hooks.example.com/events/{topic}", "http://127.0.0.1:8080/in?topic={topic}",
		"https://user:pa%40ss@h/x", "http://h"} {
		o := webhook.DefaultOptions()
		o.URL = u
		o.Headers = []string{"Authorization: Bearer abc", "X-Team:payments"}
		o.SigningSecret = "0123456789abcdef"
		if ps := o.Validate(); len(ps) != 0 {
			t.Errorf("%s: %v", u, ps)
		}
	}
}

func TestTheSummaryNamesTheStaticHeadersButNotTheirValues(t *testing.T) {
	t.Parallel()
	o := webhook.DefaultOptions()
	o.URL = "https://u:hunter22@hooks.example.com/{topic}"
	o.Headers = []string{"Authorization: Bearer tok-3141"}
	o.SigningSecret = driveropt.Secret("0123456789abcdef")
	s := o.Summary()
	got := strings.Join(s.Auth, ", ")
	if got != "hmac-sha256 signature, header Authorization" || !s.TLS {
		t.Fatalf("summary %+v", s)
	}
	if strings.Contains(got, "tok-3141") {
		t.Fatalf("the summary shows a header value: %s", got)
	}
}
