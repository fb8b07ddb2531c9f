package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

func TestNewRefusesConfigurationItCannotUseAndSaysWhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		modify func(*Options)
		want   string
	}{
		{"a driver without brokers is refused", func(c *Options) { c.Brokers = nil }, "brokers"},
		{"an unreadable CA file is refused", func(c *Options) {
			c.TLS = driveropt.TLS{Enabled: true, CAFile: filepath.Join(dir, "missing.pem")}
		}, "tls.ca_file"},
		{"a CA file without a certificate is refused", func(c *Options) {
			c.TLS = driveropt.TLS{Enabled: true, CAFile: junk}
		}, "tls.ca_file"},
		{"an unusable client key pair is refused", func(c *Options) {
			c.TLS = driveropt.TLS{Enabled: true, CertFile: junk, KeyFile: junk}
		}, "tls.cert_file"},
		{"an unknown SASL mechanism is refused", func(c *Options) {
			c.SASL = SASL{Mechanism: "gssapi", Username: "u", Password: "hunter2-secret"}
		}, "sasl.mechanism"},
		{"an unknown compression codec is refused", func(c *Options) { c.Compression = "brotli" }, "compression"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig("127.0.0.1:9092")
			c.modify(&cfg)
			d, err := New("bus", cfg, quiet)
			if err == nil {
				d.Close()
				t.Fatal("New accepted it")
			}
			for _, part := range []string{`kafka driver "bus"`, c.want} {
				if !strings.Contains(err.Error(), part) {
					t.Fatalf("the error %q does not name %s", err, part)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error %q reveals the password", err)
			}
		})
	}
}

func TestEveryCompressionCodecRoundTrips(t *testing.T) {
	t.Parallel()
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	k := testenv.NewKafka(t, 3, codecs...)
	for _, codec := range codecs {
		t.Run(codec, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(k.Addr())
			cfg.Compression = codec
			d := newDriver(t, cfg)
			msgs := numbered(codec, 40, "a", "b", "c")
			for i, err := range d.Publish(testCtx(t), msgs) {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			for _, ms := range readTopic(t, k.Addr(), codec, len(msgs)) {
				for _, m := range ms {
					if !strings.HasPrefix(string(m.Value), "payload-") {
						t.Fatalf("read back %q", m.Value)
					}
				}
			}
		})
	}
}

func TestSASLAuthenticatesWithEveryMechanism(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "alice", "plain-secret"),
		kfake.Superuser("SCRAM-SHA-256", "bob", "scram256-secret"),
		kfake.Superuser("SCRAM-SHA-512", "c=ar,ol", "scram512-secret"), // a name SCRAM must escape
		kfake.SeedTopics(3, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]

	cases := []struct {
		name      string
		sasl      SASL
		published bool
	}{
		{"PLAIN with the right password publishes", SASL{Mechanism: "plain", Username: "alice", Password: "plain-secret"}, true},
		{"SCRAM-SHA-256 with the right password publishes", SASL{Mechanism: "scram-sha-256", Username: "bob", Password: "scram256-secret"}, true},
		{"SCRAM-SHA-512 with an escaped user name publishes", SASL{Mechanism: "scram-sha-512", Username: "c=ar,ol", Password: "scram512-secret"}, true},
		{"PLAIN with a wrong password does not", SASL{Mechanism: "plain", Username: "alice", Password: "wrong-one"}, false},
		{"SCRAM-SHA-256 with a wrong password does not", SASL{Mechanism: "scram-sha-256", Username: "bob", Password: "wrong-one"}, false},
		{"a SCRAM hash the user has no credential for does not", SASL{Mechanism: "scram-sha-512", Username: "bob", Password: "scram256-secret"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(addr)
			cfg.SASL = tc.sasl
			d := newDriver(t, cfg)
			for i, err := range d.Publish(testCtx(t), numbered("events", 3, "a")) {
				switch {
				case tc.published && err != nil:
					t.Fatalf("message %d: %v", i, err)
				case !tc.published && err == nil:
					t.Fatalf("message %d was published with bad credentials", i)
				case err != nil && strings.Contains(err.Error(), tc.sasl.Password.Reveal()):
					t.Fatalf("the error %q reveals the password", err)
				case err != nil && i == 0:
					// kfake hangs up on bad credentials where Kafka answers
					// SASL_AUTHENTICATION_FAILED first; see the next test.
					t.Logf("bad credentials: %v", err)
				}
			}
		})
	}
}

func TestABrokerRejectingCredentialsDefersWithoutFailingMessages(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "bob", "scram256-secret"), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Kafka's answer to bad credentials, before it closes the connection.
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
		resp.ErrorMessage = &msg
		return resp, nil, true
	})
	cfg := testConfig(c.ListenAddrs()[0])
	cfg.SASL = SASL{Mechanism: "scram-sha-256", Username: "bob", Password: "wrong-one"}
	d := newDriver(t, cfg)
	for i, err := range d.Publish(testCtx(t), numbered("events", 3, "a")) {
		if router.KindOf(err) != router.KindUnreachable || !errors.Is(err, kafka.SASLAuthenticationFailed) {
			t.Fatalf("message %d: %v (%s), want unreachable SASL_AUTHENTICATION_FAILED", i, err, router.KindOf(err))
		}
	}
}

func TestTLSVerifiesTheBrokerAndPresentsTheClientCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "outboxd test CA")
	other := newCA(t, "someone else's CA")
	serverCert := ca.issue(t, "broker", x509.ExtKeyUsageServerAuth)
	clientCert := ca.issue(t, "outboxd", x509.ExtKeyUsageClientAuth)
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.cert)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "events"), kfake.TLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	caFile, otherFile := ca.writePEM(t, dir, "ca.pem"), other.writePEM(t, dir, "other.pem")
	certFile, keyFile := writeKeyPair(t, dir, "client", clientCert)

	cases := []struct {
		name string
		tls  driveropt.TLS
		want router.Kind // -1: published
	}{
		{"a broker signed by our CA, with our client certificate, is published to",
			driveropt.TLS{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, -1},
		{"a broker signed by a CA we do not trust is unreachable",
			driveropt.TLS{Enabled: true, CAFile: otherFile, CertFile: certFile, KeyFile: keyFile}, router.KindUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(addr)
			cfg.TLS = tc.tls
			d := newDriver(t, cfg)
			for i, err := range d.Publish(testCtx(t), numbered("events", 3, "a")) {
				if tc.want < 0 && err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if tc.want >= 0 && router.KindOf(err) != tc.want {
					t.Fatalf("message %d: %v (%s), want %s", i, err, router.KindOf(err), tc.want)
				}
			}
		})
	}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

// issue signs a certificate for 127.0.0.1 with usage.
func (ca testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca testCA) writePEM(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeKeyPair(t *testing.T, dir, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
