package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router/driveropt"
)

func TestValidateReportsEveryBadOption(t *testing.T) {
	t.Parallel()
	good := func() Options {
		o := DefaultOptions()
		o.Addr = "cache.internal:6379"
		return o
	}
	if ps := good().Validate(); len(ps) != 0 {
		t.Fatalf("the defaults with an address: %v", ps)
	}
	cases := []struct {
		name   string
		change func(o *Options)
		key    string
		msg    string
	}{
		{"no address is refused", func(o *Options) { o.Addr = "" }, "addr", "required"},
		{"an address without a port is refused", func(o *Options) { o.Addr = "cache.internal" }, "addr",
			`want host:port, got "cache.internal": missing port in address`},
		{"a URL is refused: the address is host:port", func(o *Options) { o.Addr = "redis://cache:6379" }, "addr", "want host:port"},
		{"an address without a host is refused", func(o *Options) { o.Addr = ":6379" }, "addr", "no host"},
		{"port 0 is refused", func(o *Options) { o.Addr = "cache:0" }, "addr", "port must be a number from 1 to 65535"},
		{"a user name without a password is refused", func(o *Options) { o.Username = "outboxd" }, "password",
			"required when username is set"},
		{"the redaction placeholder as a password is refused", func(o *Options) { o.Password = driveropt.Mask }, "password",
			"holds the placeholder"},
		{"a negative database index is refused", func(o *Options) { o.DB = -1 }, "db", "must be between 0 and 2147483647, got -1"},
		{"a CA file without TLS is refused", func(o *Options) { o.TLS.CAFile = "ca.pem" }, "tls.ca_file", "set, but tls.enabled is false"},
		{"a certificate without its key is refused", func(o *Options) { o.TLS = driveropt.TLS{Enabled: true, CertFile: "c.pem"} },
			"tls.cert_file", "set both or neither"},
		{"a zero publish timeout is refused", func(o *Options) { o.PublishTimeout = 0 }, "publish_timeout", "must be positive, got 0s"},
		{"a negative publish timeout is refused", func(o *Options) { o.PublishTimeout = -time.Second }, "publish_timeout", "must be positive"},
		{"a negative pool size is refused", func(o *Options) { o.PoolSize = -1 }, "pool_size", "must be between 0 and 10000, got -1"},
		{"a pool size beyond reason is refused", func(o *Options) { o.PoolSize = 10001 }, "pool_size", "must be between 0 and 10000"},
		{"a zero payload limit is refused", func(o *Options) { o.MaxPayloadBytes = 0 }, "max_payload_bytes", "must be between 1 and"},
		{"a negative maxlen is refused", func(o *Options) { o.MaxLen = -5 }, "maxlen", "must not be negative (0 never trims), got -5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := good()
			tc.change(&o)
			ps := o.Validate()
			if len(ps) != 1 || ps[0].Key != tc.key || !strings.Contains(ps[0].Msg, tc.msg) {
				t.Fatalf("problems %v, want one for %s saying %q", ps, tc.key, tc.msg)
			}
			if strings.Contains(ps[0].Error(), driveropt.Mask) && tc.key != "password" {
				t.Fatalf("the problem shows a secret: %v", ps[0])
			}
		})
	}
}

func TestSummaryNamesTheServerAndHowTheDriverAuthenticates(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	o.Addr = "cache:6379"
	if s := o.Summary(); len(s.Servers) != 1 || s.Servers[0] != "cache:6379" || len(s.Auth) != 0 || s.TLS {
		t.Fatalf("no auth: %+v", s)
	}
	o.Password = "pw"
	if s := o.Summary(); len(s.Auth) != 1 || s.Auth[0] != "password" {
		t.Fatalf("a password alone: %+v", s)
	}
	o.Username, o.TLS.Enabled = "outboxd", true
	if s := o.Summary(); len(s.Auth) != 1 || s.Auth[0] != "user/password" || !s.TLS {
		t.Fatalf("a user and password over TLS: %+v", s)
	}
}

func TestNewRefusesSettingsItCannotUse(t *testing.T) {
	t.Parallel()
	if _, err := New("cache", Options{}, nil); err == nil || !strings.Contains(err.Error(), `redis driver "cache": addr`) {
		t.Fatalf("no address: %v", err)
	}
	o := Options{Addr: "cache:6379", TLS: driveropt.TLS{Enabled: true, CAFile: "/nonexistent/ca.pem"}}
	if _, err := New("cache", o, nil); err == nil || !strings.Contains(err.Error(), "tls.ca_file") {
		t.Fatalf("an unreadable CA file: %v", err)
	}
}
