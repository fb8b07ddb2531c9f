package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/discard"
	natsdrv "github.com/outboxd/outboxd/router/nats"
)

// The PostgreSQL TLS path, exercised end to end: migrations, the pool, the listener and
// every loop of a real dispatcher connect with the DSN's sslmode, and a row is delivered.
// Against the test server when it has ssl on (sslmode=require, each connection checked
// in pg_stat_ssl); otherwise against a throwaway server started here with a certificate
// made here, with sslmode=verify-full and the CA as sslrootcert. Either way, a CA that
// did not sign the server's certificate is refused.
func TestTheDispatcherReachesPostgreSQLOverTLS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	var ssl string
	if err := testenv.Connect(t, testenv.AdminDSN()).QueryRow(ctx, "SHOW ssl").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	stranger := newTestCA(t, "a CA that signed nothing of this server's")
	if ssl == "on" {
		dsn := withParams(t, testenv.EmptyDatabase(t), "sslmode", "require")
		deliverOverTLS(t, ctx, dsn)
		refusedByVerification(t, ctx, withParams(t, dsn, "sslmode", "verify-full", "sslrootcert", stranger.writePEM(t)))
		return
	}
	ca := newTestCA(t, "outboxd throwaway PostgreSQL CA")
	dsn := startTLSPostgres(t, ca)
	deliverOverTLS(t, ctx, withParams(t, dsn, "sslmode", "verify-full", "sslrootcert", ca.writePEM(t)))
	refusedByVerification(t, ctx, withParams(t, dsn, "sslmode", "verify-full", "sslrootcert", stranger.writePEM(t)))
	// The throwaway server takes TLS connections only.
	if _, err := pgx.Connect(ctx, withParams(t, dsn, "sslmode", "disable")); err == nil || !strings.Contains(err.Error(), "no encryption") {
		t.Fatalf("a connection without TLS: %v; want the server to refuse it", err)
	}
}

// deliverOverTLS runs a dispatcher on dsn, delivers one row through it and checks that
// every connection it opened is encrypted.
func deliverOverTLS(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	app := "outboxd-tls-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	dsn = withParams(t, dsn, "application_name", app)
	nats := testenv.NewNATS(t)
	cfg := config.Default()
	cfg.DatabaseURL, cfg.ReplicaID, cfg.HTTP.Addr = dsn, "tls-test", ""
	drv := natsdrv.DefaultOptions()
	drv.URL = nats.URL()
	cfg.Drivers = map[string]config.Driver{"bus": {Type: natsdrv.Type, Options: drv}}
	s := config.DefaultStream()
	s.Driver, s.PollInterval = "bus", 50*time.Millisecond
	cfg.Streams = map[string]config.Stream{"orders": s}
	must(t, cfg.Validate())
	d, err := NewDispatcher(ctx, &cfg, slog.New(slog.DiscardHandler), Options{Migrate: true})
	if err != nil {
		t.Fatalf("dispatcher over TLS (%s): %v", config.RedactDSN(dsn), err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	}()

	conn, err := pgx.Connect(ctx, dsn)
	must(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload) VALUES ('orders', 'created', 'x')`)
	must(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var delivered int
		must(t, conn.QueryRow(ctx, `SELECT count(*) FROM outbox.messages WHERE status = 'delivered'`).Scan(&delivered))
		if delivered == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the row was not delivered over TLS within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The listener and the pool's connections, the test's own among them: all TLS.
	var encrypted, plain int
	var versions []string
	must(t, conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl),
		coalesce(array_agg(DISTINCT s.version) FILTER (WHERE s.ssl), '{}')
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1`, app).Scan(&encrypted, &plain, &versions))
	if encrypted < 3 || plain != 0 {
		t.Fatalf("%d encrypted and %d plain connections of %s; want the listener, the pool and this test's, all encrypted", encrypted, plain, app)
	}
	t.Logf("%d connections over %v", encrypted, versions)
	if slices.ContainsFunc(versions, func(v string) bool { return v < "TLSv1.2" }) {
		t.Fatalf("TLS versions %v: below 1.2", versions)
	}
}

// refusedByVerification checks that a dispatcher with dsn, whose sslrootcert did not
// sign the server's certificate, refuses to start, naming the certificate problem and
// not the password.
func refusedByVerification(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	cfg := config.Default()
	cfg.DatabaseURL, cfg.ReplicaID, cfg.HTTP.Addr = dsn, "tls-test", ""
	cfg.Drivers = map[string]config.Driver{"bus": {Type: discard.Type, Options: discard.Options{}}}
	s := config.DefaultStream()
	s.Driver = "bus"
	cfg.Streams = map[string]config.Stream{"orders": s}
	must(t, cfg.Validate())
	d, err := NewDispatcher(ctx, &cfg, slog.New(slog.DiscardHandler), Options{Migrate: true})
	if err == nil {
		_ = d.close()
		t.Fatal("a server whose certificate the configured CA did not sign was trusted")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("error %q does not say the certificate was not trusted", err)
	}
}

// withParams sets query parameters on a URL DSN.
func withParams(t *testing.T, dsn string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	must(t, err)
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca testCA) writePEM(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(path, ca.pem, 0o600))
	return path
}

// issueServer returns a certificate and key for a server at 127.0.0.1, in PEM.
func (ca testCA) issueServer(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// startTLSPostgres starts a throwaway PostgreSQL server for t, as
// scripts/ensure-postgres.sh does (the installed server binaries; as the postgres user
// when root; data under /var/tmp), that takes only TLS connections, with a certificate
// ca signed. It returns the admin DSN, without sslmode; the server stops when t ends.
func startTLSPostgres(t *testing.T, ca testCA) string {
	t.Helper()
	bindir := serverBinaries(t)
	var runAs []string
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Fatalf("running as root, the throwaway TLS server needs the postgres OS user: %v "+
				"(scripts/ensure-postgres.sh creates it)", err)
		}
		runAs = []string{"runuser", "-u", "postgres", "--"}
	}
	base, err := os.MkdirTemp("/var/tmp", "outboxd-tls-pg.")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if len(runAs) > 0 {
		must(t, exec.Command("chown", "postgres:", base).Run())
	}
	cmd := func(args ...string) *exec.Cmd {
		argv := append(slices.Clone(runAs), args...)
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir = base
		return c
	}
	data := filepath.Join(base, "data")
	if out, err := cmd(filepath.Join(bindir, "initdb"), "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8",
		"--locale=C", "-D", data).CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	certPEM, keyPEM := ca.issueServer(t)
	port := freePort(t)
	files := map[string][]byte{
		"server.crt": certPEM,
		"server.key": keyPEM,
		"pg_hba.conf": []byte("local all all trust\n" +
			"hostssl all all 127.0.0.1/32 trust\n" +
			"hostnossl all all 127.0.0.1/32 reject\n"),
	}
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"+
		"ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nfsync = off\n", port, base)
	for name, content := range files {
		path := filepath.Join(data, name)
		must(t, os.WriteFile(path, content, 0o600))
		if len(runAs) > 0 {
			must(t, exec.Command("chown", "postgres:", path).Run())
		}
	}
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(conf)
	must(t, err)
	must(t, f.Close())
	if out, err := cmd(filepath.Join(bindir, "pg_ctl"), "-D", data, "-l", filepath.Join(base, "server.log"),
		"-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(base, "server.log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := cmd(filepath.Join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Errorf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)
}

// serverBinaries finds initdb and pg_ctl as scripts/ensure-postgres.sh does.
func serverBinaries(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
				return d
			}
		}
	}
	t.Fatal("the test server has ssl off, so this test starts its own TLS server and needs the PostgreSQL server " +
		"binaries (initdb, pg_ctl): sudo apt-get install -y postgresql, or turn ssl on in the test server")
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
