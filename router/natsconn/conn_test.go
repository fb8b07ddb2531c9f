package natsconn_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/outboxd/outboxd/router/driveropt"
	"github.com/outboxd/outboxd/router/natsconn"
)

var discard = slog.New(slog.DiscardHandler)

func TestConnectRefusesSettingsItCannotUseNamingDriverAndSetting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := write(t, dir, "not.pem", "not a certificate")
	noSeed := write(t, dir, "noseed.creds", "just some text")
	missing := filepath.Join(dir, "missing")
	cases := []struct {
		name    string
		cfg     natsconn.Options
		setting string
	}{
		{"a URL that does not parse", natsconn.Options{URL: "nats://user:hunter2@[::1"}, "url"},
		{"a URL with a foreign scheme", natsconn.Options{URL: "http://127.0.0.1:4222"}, "url"},
		{"a second URL with no host", natsconn.Options{URL: "nats://127.0.0.1:4222,nats://"}, "url"},
		{"an empty server list", natsconn.Options{URL: " , "}, "url"},
		{"a creds file that does not exist", natsconn.Options{URL: "nats://127.0.0.1:1", CredsFile: missing}, "creds_file"},
		{"a creds file without a seed", natsconn.Options{URL: "nats://127.0.0.1:1", CredsFile: noSeed}, "creds_file"},
		{"a CA file that does not exist", natsconn.Options{URL: "nats://127.0.0.1:1", TLS: driveropt.TLS{Enabled: true, CAFile: missing}}, "tls.ca_file"},
		{"a CA file without a certificate", natsconn.Options{URL: "nats://127.0.0.1:1", TLS: driveropt.TLS{Enabled: true, CAFile: notPEM}}, "tls.ca_file"},
		{"a client certificate that does not exist", natsconn.Options{URL: "nats://127.0.0.1:1", TLS: driveropt.TLS{Enabled: true, CertFile: missing, KeyFile: missing}}, "tls.cert_file"},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused", func(t *testing.T) {
			t.Parallel()
			nc, err := natsconn.Connect("orders-bus", c.cfg, discard)
			if err == nil {
				nc.Close()
				t.Fatal("Connect accepted it")
			}
			for _, want := range []string{"driver orders-bus", c.setting} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q shows the password in the URL", err)
			}
		})
	}
}

func TestConnectReturnsAConnectionThatKeepsTryingWhenNoServerAnswers(t *testing.T) {
	t.Parallel()
	nc := connect(t, natsconn.Options{URL: absentServerURL(t)})
	if nc.IsConnected() {
		t.Fatal("connected to nothing")
	}
	if nc.IsClosed() {
		t.Fatal("the connection gave up")
	}
}

func TestConnectAuthenticatesWithATokenOrAUserAndPassword(t *testing.T) {
	t.Parallel()
	tokenURL := startServer(t, &server.Options{Authorization: "s3cret"})
	userURL := startServer(t, &server.Options{Username: "outboxd", Password: "pa55"})
	cases := []struct {
		name      string
		cfg       natsconn.Options
		connected bool
	}{
		{"the right token connects", natsconn.Options{URL: tokenURL, Token: "s3cret"}, true},
		{"a wrong token does not connect", natsconn.Options{URL: tokenURL, Token: "guess"}, false},
		{"the right user and password connect", natsconn.Options{URL: userURL, Username: "outboxd", Password: "pa55"}, true},
		{"a wrong password does not connect", natsconn.Options{URL: userURL, Username: "outboxd", Password: "guess"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nc := connect(t, c.cfg)
			if nc.IsConnected() != c.connected {
				t.Fatalf("connected = %v (last error %v), want %v", nc.IsConnected(), nc.LastError(), c.connected)
			}
			if !c.connected && nc.IsClosed() {
				t.Fatal("a refused credential closed the connection for good")
			}
		})
	}
}

func TestConnectAcceptsAUsableCredsFile(t *testing.T) {
	t.Parallel()
	nc := connect(t, natsconn.Options{URL: absentServerURL(t), CredsFile: credsFile(t)})
	if nc.IsClosed() {
		t.Fatal("closed")
	}
}

func TestConnectSpeaksTLS(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	srvCert, srvKey := ca.issue(t, "server")
	cliCert, cliKey := ca.issue(t, "client")
	serverTLS, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: ca.file, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	url := startServer(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: serverTLS, TLSTimeout: 2})
	other := newCA(t)

	cases := []struct {
		name      string
		tls       driveropt.TLS
		connected bool
	}{
		{"a server signed by the configured CA is trusted", driveropt.TLS{Enabled: true, CAFile: ca.file, CertFile: cliCert, KeyFile: cliKey}, true},
		{"a server signed by another CA is not trusted", driveropt.TLS{Enabled: true, CAFile: other.file, CertFile: cliCert, KeyFile: cliKey}, false},
		{"insecure_skip_verify trusts any server", driveropt.TLS{Enabled: true, InsecureSkipVerify: true, CertFile: cliCert, KeyFile: cliKey}, true},
		{"a server requiring a client certificate refuses a client without one", driveropt.TLS{Enabled: true, CAFile: ca.file}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nc := connect(t, natsconn.Options{URL: url, TLS: c.tls})
			if nc.IsConnected() != c.connected {
				t.Fatalf("connected = %v (last error %v), want %v", nc.IsConnected(), nc.LastError(), c.connected)
			}
		})
	}
}

func connect(t *testing.T, cfg natsconn.Options) *nats.Conn {
	t.Helper()
	nc, err := natsconn.Connect("test", cfg, discard)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startServer starts an embedded server with opts on a random local port.
func startServer(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

func absentServerURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "nats://" + addr
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// credsFile writes a creds file holding a user JWT signed by a fresh account key and the
// user's seed.
func credsFile(t *testing.T) string {
	t.Helper()
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	token, err := jwt.NewUserClaims(pub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	return write(t, t.TempDir(), "user.creds", string(creds))
}

// ca is a throwaway certificate authority whose certificate is in file.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
	dir  string
}

func newCA(t *testing.T) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outboxd test CA"},
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
	dir := t.TempDir()
	return &ca{cert: cert, key: key, dir: dir, file: write(t, dir, "ca.pem", pemBlock("CERTIFICATE", der))}
}

// issue signs a certificate for 127.0.0.1 usable by a server and a client.
func (c *ca) issue(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Check the pair loads the way the driver will load it.
	certFile = write(t, c.dir, name+".pem", pemBlock("CERTIFICATE", der))
	keyFile = write(t, c.dir, name+"-key.pem", pemBlock("EC PRIVATE KEY", keyDER))
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func pemBlock(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}
