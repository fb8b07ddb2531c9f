package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// exporterConfigFor turns the configured base URL into the exporter's traces URL and,
// from user info, an Authorization header, then applies the standard OTLP exporter
// variables that otlptracehttp read before this exporter replaced it: headers,
// compression, timeout and certificates, the TRACES_ form over the general one. The
// endpoint, protocol and insecure variables are not read: tracing.endpoint decides those.
func exporterConfigFor(endpoint string, getenv func(string) string) (exporterConfig, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not quoted: it may hold a password.
		return exporterConfig{}, errors.New("tracing.endpoint: want an http:// or https:// collector URL")
	}
	cfg := exporterConfig{header: http.Header{}}
	env := func(name string) (string, string) {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + name, v
		}
		return "OTEL_EXPORTER_OTLP_" + name, strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name))
	}

	if name, v := env("HEADERS"); v != "" {
		if err := parseHeaders(cfg.header, v); err != nil {
			return exporterConfig{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	if u.User != nil {
		pass, _ := u.User.Password()
		cred := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
		cfg.header.Set("Authorization", "Basic "+cred)
		u.User = nil // the URL appears in errors
	}
	switch name, v := env("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		cfg.gzip = true
	default:
		return exporterConfig{}, fmt.Errorf("%s: want gzip or none, not %q", name, v)
	}
	if name, v := env("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return exporterConfig{}, fmt.Errorf("%s: want a positive number of milliseconds, not %q", name, v)
		}
		cfg.timeout = time.Duration(ms) * time.Millisecond
	}
	if u.Scheme == "https" {
		if cfg.tls, err = tlsFromEnv(env); err != nil {
			return exporterConfig{}, err
		}
	}

	path := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(path, tracesPath) {
		path += tracesPath
	}
	u.Path, u.RawPath = path, ""
	cfg.url = u.String()
	return cfg, nil
}

// parseHeaders reads the W3C-baggage-like list OTLP exporters take: k1=v1,k2=v2, values
// percent-encoded. Values are never quoted in errors: they are often API keys.
func parseHeaders(h http.Header, list string) error {
	for pair := range strings.SplitSeq(list, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\"(),/:;<=>?@[\\]{}") {
			return fmt.Errorf("want key=value pairs separated by commas, with a valid header name (at %q)", k)
		}
		val, err := url.PathUnescape(v)
		if err != nil {
			return fmt.Errorf("header %s: value is not percent-encoded properly", k)
		}
		h.Set(k, strings.TrimSpace(val))
	}
	return nil
}

// tlsFromEnv reads the CA bundle and client certificate files; nil when none is named.
func tlsFromEnv(env func(string) (string, string)) (*tls.Config, error) {
	var cfg *tls.Config
	if name, file := env("CERTIFICATE"); file != "" {
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in %s", name, file)
		}
		cfg = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	certName, certFile := env("CLIENT_CERTIFICATE")
	keyName, keyFile := env("CLIENT_KEY")
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%s and %s: set both or neither", certName, keyName)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", certName, keyName, err)
		}
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
