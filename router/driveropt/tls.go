package driveropt

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLS configures a driver's TLS client.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Check reports settings that have no effect or no partner: a file or skipped
// verification while TLS is off, a certificate without its key.
func (t TLS) Check(c *Checker, key string) {
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"insecure_skip_verify", t.InsecureSkipVerify}} {
			if f.set {
				c.Add(key+"."+f.name, "set, but tls.enabled is false")
			}
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.Add(key+".cert_file", "cert_file and key_file go together; set both or neither")
	}
}

// Client builds the TLS client configuration the settings describe, reading every file
// now so that a missing or unreadable one fails at start, naming its key. It ignores
// Enabled: a driver asks for it only when it connects with TLS.
func (t TLS) Client() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Documented as for tests only; Check reports it when set without tls.enabled.
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // the operator's explicit choice, off by default
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file %s: no PEM certificate found", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file/tls.key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
