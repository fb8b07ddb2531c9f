package tracing_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/router"
)

// writePEM writes one PEM block to a file of dir and returns its path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientCertificate makes a self-signed client certificate named cn, as files.
func clientCertificate(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, cn+".pem", "CERTIFICATE", der), writePEM(t, dir, cn+"-key.pem", "EC PRIVATE KEY", keyDER)
}

// exportOne sets tracing up for endpoint, exports one span and shuts down within wait.
func exportOne(t *testing.T, endpoint string, wait time.Duration) {
	t.Helper()
	tp, shutdown, err := tracing.Setup(context.Background(), config.Tracing{Enabled: true, Endpoint: endpoint, SampleRatio: 1, ServiceName: "s"}, "v")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	tracing.Wrap((&recorder{}).Publish, tp, "nats")(context.Background(), []router.Message{{ID: 1, Stream: "s", Topic: "t"}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_ = shutdown(ctx) // an export that failed is the collector's to see, below
}

// Not parallel: the standard variables are read from the process environment.
func TestSetupPresentsTheClientCertificateTheStandardVariablesName(t *testing.T) {
	seen := make(chan string, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if certs := r.TLS.PeerCertificates; len(certs) > 0 {
			seen <- certs[0].Subject.CommonName
		}
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.RequireAnyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cert, key := clientCertificate(t, dir, "outboxd-replica")
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", writePEM(t, dir, "ca.pem", "CERTIFICATE", srv.Certificate().Raw))
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", cert)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", key)

	exportOne(t, srv.URL, 10*time.Second)
	select {
	case cn := <-seen:
		if cn != "outboxd-replica" {
			t.Errorf("the collector saw client certificate %q, want outboxd-replica", cn)
		}
	default:
		t.Fatal("the collector took no request with a client certificate")
	}

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "")
	_, _, err := tracing.Setup(context.Background(), config.Tracing{Enabled: true, Endpoint: srv.URL, SampleRatio: 1, ServiceName: "s"}, "v")
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE") || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_CLIENT_KEY") {
		t.Errorf("Setup with a certificate and no key: %v, want an error naming both variables", err)
	}
}

// Not parallel: the standard variables are read from the process environment.
func TestSetupBoundsEachRequestByTheStandardTimeoutVariable(t *testing.T) {
	held := make(chan time.Duration, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// Read whole, so that the server notices the client leave; then hung: it answers
		// only when the client gives up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
		held <- time.Since(start)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "150") // the traces form wins

	exportOne(t, srv.URL, time.Second)
	select {
	case d := <-held:
		if d > 5*time.Second {
			t.Errorf("the request was held %v: the 150 ms timeout did not apply", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hung request was not abandoned within 10 s: the 150 ms timeout did not apply")
	}

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon")
	_, _, err := tracing.Setup(context.Background(), config.Tracing{Enabled: true, Endpoint: srv.URL, SampleRatio: 1, ServiceName: "s"}, "v")
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
		t.Errorf("Setup with a timeout of %q: %v, want an error naming the variable", "soon", err)
	}
}
