package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
)

func TestSecretShowsOnlyWhetherItIsSet(t *testing.T) {
	t.Parallel()
	s := Secret("hunter2")
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"%v prints the mask.", fmt.Sprintf("%v", s), "[REDACTED]"},
		{"%s prints the mask.", fmt.Sprintf("%s", s), "[REDACTED]"},
		{"%q quotes the mask.", fmt.Sprintf("%q", s), `"[REDACTED]"`},
		{"%+v prints the mask.", fmt.Sprintf("%+v", s), "[REDACTED]"},
		{"%#v prints the mask as Go.", fmt.Sprintf("%#v", s), `"[REDACTED]"`},
		{"%x hexes the mask, not the value.", fmt.Sprintf("%x", s), fmt.Sprintf("%x", "[REDACTED]")},
		{"Width applies to the mask.", fmt.Sprintf("%12s|", s), "  [REDACTED]|"},
		{"String returns the mask.", s.String(), "[REDACTED]"},
		{"GoString returns the mask.", s.GoString(), `"[REDACTED]"`},
		{"A struct field prints the mask.", fmt.Sprintf("%+v", struct{ P Secret }{s}), "{P:[REDACTED]}"},
		{"Reveal returns the value.", s.Reveal(), "hunter2"},
		{"An empty secret prints empty.", fmt.Sprintf("%v|%q|%#v", Secret(""), Secret(""), Secret("")), `|""|""`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
	j, err := json.Marshal(map[string]Secret{"a": s, "b": ""})
	if err != nil || string(j) != `{"a":"[REDACTED]","b":""}` {
		t.Errorf("json = %s, %v", j, err)
	}
	y, err := yaml.Marshal(map[string]Secret{"a": s})
	if err != nil || string(y) != "a: '[REDACTED]'\n" {
		t.Errorf("yaml = %q, %v", y, err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "p", s)
	if !strings.Contains(buf.String(), `"p":"[REDACTED]"`) {
		t.Errorf("slog = %s", buf.String())
	}
}

func TestRedactDSNReplacesOnlyPasswords(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"A URL password is replaced.", "postgres://app:s3cret@db:5432/app", "postgres://app:[REDACTED]@db:5432/app"},
		{"A URL without a password is kept.", "postgres://app@db/app?sslmode=require", "postgres://app@db/app?sslmode=require"},
		{"A password holding @ and / is replaced whole.", "postgres://app:a@b/c@db/app", "postgres://app:[REDACTED]@db/app"},
		{"A password query parameter is replaced.", "postgresql://db/app?user=u&password=s3cret&sslpassword=k#x", "postgresql://db/app?user=u&password=[REDACTED]&sslpassword=[REDACTED]#x"},
		{"A key=value password is replaced.", "host=db password=s3cret dbname=app", "host=db password=[REDACTED] dbname=app"},
		{"A quoted key=value password is replaced with its quotes.", "host=db password = 'se cr\\'et' user=u", "host=db password = [REDACTED] user=u"},
		{"A key=value DSN that does not parse is replaced whole.", "host=db password=se cret", "[REDACTED]"},
		{"An empty DSN stays empty.", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RedactDSN(tc.in); got != tc.want {
				t.Errorf("RedactDSN(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	for _, c := range []struct{ in, want string }{
		{"nats://u:pw@n1:4222, nats://tok@n2:4222,n3:4222", "nats://u:[REDACTED]@n1:4222, nats://[REDACTED]@n2:4222,n3:4222"},
		{"u:pw@n1:4222", "u:[REDACTED]@n1:4222"},
	} {
		if got := redactURLs(c.in); got != c.want {
			t.Errorf("redactURLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The secrets below each appear once in the fixtures, so finding one anywhere in output
// means it leaked.
var secrets = []string{"dsn-pw-7f3a", "sasl-pw-91c2", "nats-token-55de", "nats-url-pw-a1b2", "admin-tok-0123456789abcdef", "read-tok-0123456789abcdef", "read-tok-01", "hook-url-pw-c3d4", "hook-sign-0123456789", "inbox-pw-3c4d", "listen-pw-5e6f"}

const secretFile = `
database_url: postgres://app:dsn-pw-7f3a@db.internal:5432/app?sslmode=require
database:
  listen_url: postgres://app:listen-pw-5e6f@db-direct.internal:5432/app
drivers:
  bus:
    type: kafka
    brokers: [k1:9092]
    sasl: {mechanism: scram-sha-512, username: svc, password: sasl-pw-91c2}
  events:
    type: nats
    url: nats://svc:nats-url-pw-a1b2@n1:4222,nats://n2:4222
  js:
    type: jetstream
    url: nats://n1:4222
    token: nats-token-55de
  hook:
    type: http
    url: https://svc:hook-url-pw-c3d4@hooks.example.com/events/{topic}
    signing_secret: hook-sign-0123456789
  inbox:
    type: postgres
    url: postgres://consumer:inbox-pw-3c4d@inbox.internal/shop
http:
  admin_token: admin-tok-0123456789abcdef
  read_token: read-tok-0123456789abcdef
streams:
  orders: {driver: bus}
`

func assertNoSecret(t *testing.T, where, text string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s shows the secret %q:\n%s", where, s, text)
		}
	}
}

func TestSecretsNeverAppearInOutput(t *testing.T) {
	t.Parallel()
	cfg := mustLoad(t, secretFile)
	if got := optionsOf[kafka.Options](cfg, "bus").SASL.Password.Reveal(); got != "sasl-pw-91c2" {
		t.Fatalf("the fixture did not load its secrets: %q", got)
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	logger.Info("loaded", "config", cfg, "value", *cfg, "driver", cfg.Drivers["events"])
	outputs := map[string]string{
		"YAML()":          string(cfg.YAML()),
		"fmt of *Config":  fmt.Sprintf("%v %+v %#v %s %q %x", cfg, cfg, cfg, cfg, cfg, cfg),
		"fmt of Config":   fmt.Sprintf("%v %+v %#v", *cfg, *cfg, *cfg),
		"fmt of drivers":  fmt.Sprintf("%v %+v %#v", cfg.Drivers, cfg.Drivers["events"], cfg.Drivers["js"]),
		"fmt of Redacted": fmt.Sprintf("%v %+v %#v", cfg.Redacted(), cfg.Redacted().Drivers, cfg.Redacted().HTTP),
		"Redacted Reveals": optionsOf[jetstream.Options](new(cfg.Redacted()), "js").Token.Reveal() + cfg.Redacted().HTTP.AdminToken.Reveal() +
			cfg.Redacted().HTTP.ReadToken.Reveal(),
		"slog JSON": logs.String(),
	}
	for where, text := range outputs {
		assertNoSecret(t, where, text)
	}
	for where, want := range map[string]string{
		"YAML()":         "database_url: postgres://app:[REDACTED]@db.internal:5432/app?sslmode=require\n",
		"fmt of *Config": "config.Config{DatabaseURL:\"postgres://app:[REDACTED]@db.internal",
		"slog JSON":      `"url":"nats://svc:[REDACTED]@n1:4222,nats://n2:4222"`,
		"fmt of drivers": `Token:"[REDACTED]"`,
	} {
		if !strings.Contains(outputs[where], want) {
			t.Errorf("%s lacks %q:\n%s", where, want, outputs[where])
		}
	}
	if want := "url: https://svc:[REDACTED]@hooks.example.com/events/{topic}\n"; !strings.Contains(outputs["YAML()"], want) {
		t.Errorf("YAML() lacks %q:\n%s", want, outputs["YAML()"])
	}
	if want := "listen_url: postgres://app:[REDACTED]@db-direct.internal:5432/app\n"; !strings.Contains(outputs["YAML()"], want) {
		t.Errorf("YAML() lacks the redacted listen URL %q:\n%s", want, outputs["YAML()"])
	}
	if want := "url: postgres://consumer:[REDACTED]@inbox.internal/shop\n"; !strings.Contains(outputs["YAML()"], want) {
		t.Errorf("YAML() lacks the inbox's redacted DSN %q:\n%s", want, outputs["YAML()"])
	}
	if !strings.Contains(logs.String(), `"admin_token":"[REDACTED]"`) || !strings.Contains(logs.String(), `"read_token":"[REDACTED]"`) || !strings.Contains(logs.String(), `"batch_size":100`) {
		t.Errorf("slog output is not keyed as the file is:\n%s", logs.String())
	}
	if got := optionsOf[jetstream.Options](cfg, "js").Token.Reveal(); got != "nats-token-55de" {
		t.Errorf("Redacted changed the original: token %q", got)
	}
}

func TestSecretsNeverAppearInProblems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		file string
		env  []string
		keys []string
	}{
		{"A type error next to secrets quotes none of them.", strings.Replace(secretFile, "    brokers: [k1:9092]\n", "    brokers: [k1:9092]\n    write_timeout: 5\n", 1),
			nil, []string{"drivers.bus.write_timeout"}},
		{"Secrets given the wrong YAML type are not quoted.", `
drivers:
  bus: {type: kafka, brokers: [k:1], sasl: {mechanism: plain, username: u, password: [sasl-pw-91c2]}}
  js: {type: jetstream, url: "nats://n:1", token: {nats-token-55de: 1}}
http: {admin_token: [admin-tok-0123456789abcdef]}
`, nil, []string{"drivers.bus.sasl.password", "drivers.js.token", "http.admin_token"}},
		{"A secret on a driver of another type is not quoted.", `
drivers:
  bus: {type: kafka, brokers: [k:1], token: nats-token-55de, password: sasl-pw-91c2}
`, nil, []string{"drivers.bus.token", "drivers.bus.password"}},
		{"A DSN with a bad port does not quote its password.", "database_url: postgres://app:dsn-pw-7f3a@db:port/app\n", nil, []string{"database_url"}},
		{"A DSN whose password is badly escaped does not quote it.", "database_url: postgres://app:dsn-pw-7f3a%zz@db/app\n", nil, []string{"database_url"}},
		{"A key=value DSN that does not parse does not quote its password.", "database_url: host=db password=dsn-pw-7f3a dsn-pw-7f3a\n", nil, []string{"database_url"}},
		{"A key=value DSN with an open quote does not quote its password.", "database_url: host=db password='dsn-pw-7f3a\n", nil, []string{"database_url"}},
		{"A bad NATS server list does not quote its passwords.", `
drivers:
  events: {type: nats, url: "nats://svc:nats-url-pw-a1b2@n1:port,http://nats-token-55de@n2:1"}
`, nil, []string{"drivers.events.url"}},
		{"A bad inbox DSN does not quote its password.", `
drivers:
  inbox: {type: postgres, url: "postgres://consumer:inbox-pw-3c4d@inbox:port/shop"}
`, nil, []string{"drivers.inbox.url"}},
		{"A bad HTTP endpoint and a short signing secret are not quoted.", `
drivers:
  hook: {type: http, url: "https://svc:hook-url-pw-c3d4@h:port/{topic}", signing_secret: hook-sign-01}
`, nil, []string{"drivers.hook.url", "drivers.hook.signing_secret"}},
		{"A short admin token is not quoted.", "http: {admin_token: admin-tok-01}\n", nil, []string{"http.admin_token"}},
		{"A short read token is not quoted.", "http: {read_token: read-tok-01}\n", nil, []string{"http.read_token"}},
		{"A read token equal to the admin token is not quoted.",
			"http: {admin_token: admin-tok-0123456789abcdef, read_token: admin-tok-0123456789abcdef}\n", nil, []string{"http.read_token"}},
		{"A tracing endpoint with credentials is not quoted.", "tracing: {endpoint: 'grpc://u:nats-url-pw-a1b2@c:1'}\n", nil, []string{"tracing.endpoint"}},
		{"Secrets from the environment next to a type error are not quoted.", "", []string{
			"OUTBOXD_DATABASE_URL=postgres://app:dsn-pw-7f3a@db:x/app",
			"OUTBOXD_HTTP__ADMIN_TOKEN=admin-tok-01",
			"OUTBOXD_HTTP__ADMIN_TOKNE=admin-tok-0123456789abcdef",
			"OUTBOXD_JANITOR__INTERVAL=soon",
		}, []string{"database_url", "http.admin_token", "OUTBOXD_HTTP__ADMIN_TOKNE", "janitor.interval"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps := loadProblems(t, tc.file, tc.env...)
			wantKeys(t, ps, tc.keys...)
			for _, p := range ps.List {
				assertNoSecret(t, "problem "+p.Key, p.Error())
			}
		})
	}
}
