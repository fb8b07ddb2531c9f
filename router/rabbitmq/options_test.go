package rabbitmq

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

func TestValidateReportsEachProblemWithItsKey(t *testing.T) {
	t.Parallel()
	good := func() Options {
		o := DefaultOptions()
		o.URL = "amqp://app:url-pw-91c2@rabbit.internal:5672/shop"
		return o
	}
	cases := []struct {
		name    string
		change  func(o *Options)
		key     string
		problem string
	}{
		{"A missing url is required.", func(o *Options) { o.URL = "" }, "url", "required"},
		{"A url of another scheme is refused.", func(o *Options) { o.URL = "nats://app:url-pw-91c2@rabbit:4222" }, "url", "want scheme amqp or amqps"},
		{"A bare host:port is refused.", func(o *Options) { o.URL = "rabbit:5672" }, "url", "want scheme amqp or amqps"},
		{"A url without a host is refused.", func(o *Options) { o.URL = "amqp:///shop" }, "url", "no host"},
		{"A url with a bad port is refused.", func(o *Options) { o.URL = "amqp://app:url-pw-91c2@rabbit:99999/" }, "url", "port must be a number from 1 to 65535"},
		{"A url with whitespace is refused.", func(o *Options) { o.URL = "amqp://app:url-pw-91c2@rabbit /" }, "url", "contains whitespace"},
		{"A badly encoded password is refused without quoting it.", func(o *Options) { o.URL = "amqp://app:url-pw-91c2%zz@rabbit/" },
			"url", "the user name or password is not percent-encoded correctly"},
		{"A url copied from redacted output is refused.", func(o *Options) { o.URL = "amqp://app:[REDACTED]@rabbit/" },
			"url", "holds the placeholder [REDACTED] where a credential belongs"},
		{"A password without a user name is refused.", func(o *Options) { o.Password = "opt-pw-5d1e" }, "username", "set both or neither"},
		{"A user name without a password is refused.", func(o *Options) { o.Username = "app" }, "username", "set both or neither"},
		{"A password copied from redacted output is refused.", func(o *Options) { o.Username, o.Password = "app", driveropt.Mask },
			"password", "holds the placeholder [REDACTED], not a secret"},
		{"An exchange name over 255 bytes is refused.", func(o *Options) { o.Exchange = strings.Repeat("x", 256) }, "exchange", "at most 255 bytes"},
		{"An exchange name that is not UTF-8 is refused.", func(o *Options) { o.Exchange = "caf\xe9" }, "exchange", "not valid UTF-8"},
		{"A vhost over 255 bytes is refused.", func(o *Options) { o.Vhost = strings.Repeat("v", 256) }, "vhost", "at most 255 bytes"},
		{"A zero publish timeout is refused.", func(o *Options) { o.PublishTimeout = 0 }, "publish_timeout", "must be positive, got 0s"},
		{"A negative publish timeout is refused.", func(o *Options) { o.PublishTimeout = -time.Second }, "publish_timeout", "must be positive"},
		{"A zero message size limit is refused.", func(o *Options) { o.MaxMessageBytes = 0 }, "max_message_bytes", "must be between 1 and 536870912, got 0"},
		{"A message size limit above RabbitMQ's ceiling is refused.", func(o *Options) { o.MaxMessageBytes = 512<<20 + 1 },
			"max_message_bytes", "must be between 1 and 536870912"},
		{"TLS on an amqp url is refused.", func(o *Options) { o.TLS.Enabled = true }, "tls.enabled", "TLS needs an amqps:// url"},
		{"A CA file without TLS is refused.", func(o *Options) { o.TLS.CAFile = "/ca.pem" }, "tls.ca_file", "set, but tls.enabled is false"},
		{"A certificate without its key is refused.", func(o *Options) {
			o.URL, o.TLS.Enabled, o.TLS.CertFile = "amqps://rabbit/", true, "/cert.pem"
		}, "tls.cert_file", "cert_file and key_file go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := good()
			c.change(&o)
			problems := o.Validate()
			i := slices.IndexFunc(problems, func(p driveropt.Problem) bool { return p.Key == c.key })
			if i < 0 || !strings.Contains(problems[i].Msg, c.problem) {
				t.Fatalf("problems %v, want %s: …%s…", problems, c.key, c.problem)
			}
			for _, p := range problems {
				if strings.Contains(p.Msg, "url-pw-91c2") || strings.Contains(p.Msg, "opt-pw-5d1e") {
					t.Fatalf("a problem quotes a password: %v", p)
				}
			}
		})
	}
	for _, ok := range []func(o *Options){
		func(*Options) {},
		func(o *Options) { o.URL = "amqps://app:url-pw-91c2@rabbit/" },
		func(o *Options) { o.URL, o.TLS.Enabled, o.TLS.InsecureSkipVerify = "AMQPS://rabbit:5671/", true, true },
		func(o *Options) { o.Username, o.Password, o.Vhost, o.Exchange = "app", "opt-pw-5d1e", "shop", "events" },
		func(o *Options) { o.URL = "amqp://rabbit" },
	} {
		o := good()
		ok(&o)
		if problems := o.Validate(); len(problems) != 0 {
			t.Errorf("%+v: %v", o, problems)
		}
	}
}

func TestSummaryShowsServerTLSAndAuthentication(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	o.URL, o.Username, o.Password = "amqps://rabbit:5671/", "app", "pw"
	s := o.Summary()
	if !slices.Equal(s.Servers, []string{"amqps://rabbit:5671/"}) || !s.TLS || !slices.Equal(s.Auth, []string{"user/password"}) {
		t.Fatalf("summary %+v", s)
	}
}

func TestNewRefusesSettingsItCannotUseWithoutQuotingThePassword(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"a url of another scheme", Options{URL: "http://app:new-pw-77@rabbit/"}, "want scheme amqp or amqps"},
		{"a url that does not parse", Options{URL: "amqp://app:new-pw-77%zz@rabbit/"}, "not percent-encoded correctly"},
		{"a CA file that does not exist", Options{URL: "amqps://app:new-pw-77@rabbit/",
			TLS: driveropt.TLS{Enabled: true, CAFile: filepath.Join(dir, "missing.pem")}}, "tls.ca_file"},
		{"a CA file without a certificate", Options{URL: "amqps://app:new-pw-77@rabbit/",
			TLS: driveropt.TLS{Enabled: true, CAFile: notPEM}}, "no PEM certificate found"},
		{"a key pair that does not load", Options{URL: "amqps://app:new-pw-77@rabbit/",
			TLS: driveropt.TLS{Enabled: true, CertFile: notPEM, KeyFile: notPEM}}, "tls.cert_file/tls.key_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := New("bus", c.o, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `rabbitmq driver "bus"`) ||
				strings.Contains(err.Error(), "new-pw-77") {
				t.Fatalf("New: %v; want an error naming the driver, saying %q, without the password", err, c.want)
			}
		})
	}
}

func TestABrokerWhoseCertificateIsNotTrustedIsUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	o := DefaultOptions()
	o.URL = "amqps://guest:guest@" + srv.Listener.Addr().String() + "/"
	o.TLS = driveropt.TLS{Enabled: true}
	d, err := New("tls", o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	errs := d.Publish(testCtx(t), numbered("x", 2, "a"))
	for i, err := range errs {
		var verify *tls.CertificateVerificationError
		if router.KindOf(err) != router.KindUnreachable || !errors.As(err, &verify) {
			t.Fatalf("message %d: %v (%s); want unreachable, a certificate problem", i, err, router.KindOf(err))
		}
	}
}
