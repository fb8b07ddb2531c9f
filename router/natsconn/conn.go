// Package natsconn opens the connection both NATS drivers (core and JetStream) use and
// writes an outbox message in NATS's wire form.
//
// Invariant: a broker that is down never stops outboxd from booting, and a publish never
// waits in a client-side buffer. Connect retries in the background forever, and the
// reconnect buffer is disabled, so while the server is away a publish fails at once and
// the dispatcher sees "unreachable" instead of a message parked where nobody can confirm
// it. Only settings that can never work (a malformed URL, an unreadable creds, CA,
// certificate or key file) make Connect fail, and its error names the driver and the
// setting.
//
// Options (options.go) are the settings both NATS drivers share and embed.
//
// Package natsconn is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package natsconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router/driveropt"
)

// reconnectWait is the pause between two connection attempts to the same server. It is
// short because a publish while disconnected fails at once: the sooner the connection is
// back, the sooner deferred messages flow again.
const reconnectWait = 250 * time.Millisecond

// Connect connects to the servers of cfg for the driver called name. It returns a
// connection even when no server answers yet (the connection keeps trying); it fails only
// for settings it cannot use. Connection events are logged through logger.
func Connect(name string, cfg Options, logger *slog.Logger) (*nats.Conn, error) {
	opts, err := options(name, cfg, logger)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		// With RetryOnFailedConnect only an unusable setting gets here. An error quoting a
		// URL is not passed on: the URL may hold a password.
		if strings.Contains(err.Error(), "://") {
			return nil, fmt.Errorf("driver %s: url: the server list is not usable", name)
		}
		return nil, fmt.Errorf("driver %s: connect: %w", name, err)
	}
	if !nc.IsConnected() {
		logger.Warn("NATS server not reachable yet; retrying in the background",
			"error", nc.LastError(), "reconnect_wait", reconnectWait)
	}
	return nc, nil
}

// options turns cfg into connection options, checking every file it names.
func options(name string, cfg Options, logger *slog.Logger) ([]nats.Option, error) {
	if err := checkURLs(cfg.URL); err != nil {
		return nil, fmt.Errorf("driver %s: url: %w", name, err)
	}
	ev := &events{logger: logger}
	opts := []nats.Option{
		nats.Name("outboxd/" + name), // as the server's monitoring shows it
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectBufSize(-1),
		// A credential refused twice would otherwise close the connection for good; a
		// rotated secret or an auth service that is down must cost time, not the driver.
		nats.IgnoreAuthErrorAbort(),
		nats.ConnectHandler(ev.connected),
		nats.ReconnectHandler(ev.connected),
		nats.DisconnectErrHandler(ev.disconnected),
		nats.ReconnectErrHandler(ev.attemptFailed),
		nats.ErrorHandler(ev.asyncError),
	}
	if tok := cfg.Token.Reveal(); tok != "" {
		opts = append(opts, nats.Token(tok))
	}
	if cfg.Username != "" || cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.Username, cfg.Password.Reveal()))
	}
	if cfg.CredsFile != "" {
		creds := nats.UserCredentials(cfg.CredsFile)
		if err := checkCreds(creds); err != nil {
			return nil, fmt.Errorf("driver %s: creds_file %s: %w", name, cfg.CredsFile, err)
		}
		opts = append(opts, creds)
	}
	if cfg.TLS.Enabled {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("driver %s: %w", name, err)
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// checkURLs checks the comma-separated server list the way the library will read it,
// without quoting a URL (it may carry a password).
func checkURLs(list string) error {
	n := 0
	for i, raw := range strings.Split(list, ",") {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		n++
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		switch {
		case err != nil:
			return fmt.Errorf("server %d is not a URL", i+1)
		case !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme):
			return fmt.Errorf("server %d: scheme %q, want nats, tls, ws or wss", i+1, u.Scheme)
		case u.Hostname() == "":
			return fmt.Errorf("server %d has no host", i+1)
		}
	}
	if n == 0 {
		return errors.New("no server given")
	}
	return nil
}

// checkCreds runs the library's own reading of a creds file once, so that a file that
// is missing, unreadable or holds no usable JWT and seed is refused at start-up rather
// than on every reconnect.
func checkCreds(creds nats.Option) error {
	var o nats.Options
	if err := creds(&o); err != nil {
		return err
	}
	if _, err := o.UserJWT(); err != nil {
		return err
	}
	_, err := o.SignatureCB([]byte("outboxd-creds-check"))
	return err
}

// tlsConfig builds the TLS client configuration, reading every file now.
func tlsConfig(t driveropt.TLS) (*tls.Config, error) { return t.Client() }

// events logs connection events. A failed attempt is logged only when its error differs
// from the previous one: attempts repeat every reconnectWait for as long as the server
// is away.
type events struct {
	logger *slog.Logger
	mu     sync.Mutex
	last   string // error of the last logged failed attempt; "" once connected
}

func (e *events) connected(nc *nats.Conn) {
	e.mu.Lock()
	e.last = ""
	e.mu.Unlock()
	e.logger.Info("connected to NATS", "server", nc.ConnectedUrlRedacted())
}

func (e *events) disconnected(_ *nats.Conn, err error) {
	if err != nil {
		e.logger.Warn("disconnected from NATS; reconnecting", "error", err)
	}
}

func (e *events) attemptFailed(_ *nats.Conn, err error) {
	if err == nil {
		return
	}
	e.mu.Lock()
	repeated := err.Error() == e.last
	e.last = err.Error()
	e.mu.Unlock()
	if !repeated {
		e.logger.Warn("NATS connection attempt failed; retrying", "error", err, "reconnect_wait", reconnectWait)
	}
}

func (e *events) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	attrs := []any{"error", err}
	if sub != nil {
		attrs = append(attrs, "subject", sub.Subject)
	}
	e.logger.Error("NATS asynchronous error", attrs...)
}
