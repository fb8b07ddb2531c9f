package driveropt

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSClientReadsItsFilesAtOnceAndNamesTheKeyOfABadOne(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tls  TLS
		want string // "" for no error
	}{
		{"a readable CA file is trusted", TLS{Enabled: true, CAFile: ca}, ""},
		{"a missing CA file is named", TLS{Enabled: true, CAFile: filepath.Join(dir, "absent.pem")}, "tls.ca_file"},
		{"a CA file without a certificate says so", TLS{Enabled: true, CAFile: notPEM}, "no PEM certificate found"},
		{"a bad key pair names both keys", TLS{Enabled: true, CertFile: notPEM, KeyFile: notPEM}, "tls.cert_file/tls.key_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc, err := c.tls.Client()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one containing %q", err, c.want)
			case c.want == "" && tc.RootCAs == nil:
				t.Fatal("the CA file was not made the trusted roots")
			}
		})
	}
	// The configuration trusts the server whose certificate the CA file holds.
	tc, err := TLS{Enabled: true, CAFile: ca}.Client()
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("a server signed by the CA file was not trusted: %v", err)
	}
	_ = resp.Body.Close()
}
