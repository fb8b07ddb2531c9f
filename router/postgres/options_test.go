package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router/driveropt"
)

func TestValidateReportsEveryBadOptionClearly(t *testing.T) {
	t.Parallel()
	const good = "postgres://inbox:s3cret@db.example:5432/shop?sslmode=require"
	cases := []struct {
		name string
		set  func(o *Options)
		key  string // "" when the options are valid
		says string
	}{
		{"The defaults with a URL are valid.", func(*Options) {}, "", ""},
		{"A key=value DSN is valid.", func(o *Options) { o.URL = "host=db port=5432 dbname=shop password='s3cret'" }, "", ""},
		{"Another schema-qualified table is valid.", func(o *Options) { o.Table = "billing.inbox_v2" }, "", ""},
		{"A URL is required.", func(o *Options) { o.URL = "" }, "url", "required: a postgres:// URL or key=value pairs"},
		{"A URL of another scheme is refused.", func(o *Options) { o.URL = "mysql://u:s3cret@db/shop" }, "url", `want a postgres:// or postgresql:// URL, got scheme "mysql"`},
		{"A port out of range is refused.", func(o *Options) { o.URL = "postgres://u:s3cret@db:99999/shop" }, "url", "the port must be a number from 1 to 65535"},
		{"An unknown sslmode is refused.", func(o *Options) { o.URL = "postgres://u:s3cret@db/shop?sslmode=maybe" }, "url", "sslmode must be one of"},
		{"The redaction placeholder is refused.", func(o *Options) { o.URL = "postgres://u:" + driveropt.Mask + "@db/shop" }, "url", "holds the placeholder"},
		{"A table without its schema is refused.", func(o *Options) { o.Table = "inbox" }, "table", `"inbox": want schema.table, such as public.outboxd_inbox`},
		{"A table in capitals is refused.", func(o *Options) { o.Table = "public.Inbox" }, "table", "table: \"Inbox\" is not a plain identifier"},
		{"A name of three parts is refused.", func(o *Options) { o.Table = "db.public.inbox" }, "table", "table: \"public.inbox\" is not a plain identifier"},
		{"A quote in the schema is refused.", func(o *Options) { o.Table = `pub"lic.inbox` }, "table", "schema: "},
		{"An empty table is refused.", func(o *Options) { o.Table = "" }, "table", "want schema.table"},
		{"No connection at all is refused.", func(o *Options) { o.MaxConns = 0 }, "max_conns", "must be between 1 and 100, got 0"},
		{"Too many connections are refused.", func(o *Options) { o.MaxConns = 101 }, "max_conns", "must be between 1 and 100, got 101"},
		{"A publish timeout of zero is refused.", func(o *Options) { o.PublishTimeout = 0 }, "publish_timeout", "must be between 100ms and 10m, got 0s"},
		{"A publish timeout of hours is refused.", func(o *Options) { o.PublishTimeout = time.Hour }, "publish_timeout", "must be between 100ms and 10m, got 1h"},
		{"A payload limit of zero is refused.", func(o *Options) { o.MaxPayloadBytes = 0 }, "max_payload_bytes", "must be between 1 and 536870912, got 0"},
		{"A payload limit near PostgreSQL's 1 GB is refused.", func(o *Options) { o.MaxPayloadBytes = 1 << 30 }, "max_payload_bytes", "must be between 1 and 536870912"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			o.URL = good
			c.set(&o)
			ps := o.Validate()
			if c.key == "" {
				if len(ps) > 0 {
					t.Fatalf("problems with valid options: %v", ps)
				}
				return
			}
			if len(ps) != 1 || ps[0].Key != c.key || !strings.Contains(ps[0].Msg, c.says) {
				t.Fatalf("problems %v, want one for %s saying %q", ps, c.key, c.says)
			}
			if strings.Contains(ps[0].Error(), "s3cret") {
				t.Fatalf("the problem %q quotes the password", ps[0])
			}
		})
	}
}

func TestNewNeverQuotesThePassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://inbox:s3cret@db.example/shop?sslmode=maybe",
		"host=db password = s3cret sslmode=maybe",
		"host=db password='s3\\'cret' sslmode=maybe",
	} {
		o := DefaultOptions()
		o.URL = dsn
		_, err := New("inbox", o, quiet)
		if err == nil {
			t.Fatalf("New(%s) succeeded", dsn)
		}
		if strings.Contains(err.Error(), "s3") {
			t.Fatalf("New's error quotes the password: %v", err)
		}
		if !strings.Contains(err.Error(), `postgres driver "inbox": url`) {
			t.Fatalf("New's error does not say which setting is wrong: %v", err)
		}
	}
}

func TestNewTakesZeroValuesAsTheDefaults(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Options{URL: "postgres://db.example/shop"})
	if d.where != DefaultTable || d.timeout != DefaultPublishTimeout || d.maxPayload != DefaultMaxPayloadBytes || d.pool.Config().MaxConns != DefaultMaxConns {
		t.Fatalf("a driver of zero options: table %s, timeout %s, max payload %d, max conns %d",
			d.where, d.timeout, d.maxPayload, d.pool.Config().MaxConns)
	}
}
