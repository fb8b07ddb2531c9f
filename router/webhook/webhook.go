// Package webhook publishes outbox messages to an HTTP endpoint with net/http: one POST
// per message, or one per batch and URL in batch mode.
//
// Invariant: a message is confirmed only when the endpoint answered 2xx to a request that
// carried it, and each message's result is its own: a batch the endpoint refuses with a
// 4xx is posted again message by message, so that the message it refuses fails alone.
// Messages of one key are never in flight at once: a key's requests go one after another,
// in order, and in a key-ordered publish (router.KeyOrdered) nothing more of a key is sent
// once one of its messages failed. Redirects are not followed.
//
// The URL is a template: each {topic} in it is replaced by the message's topic, escaped
// for where it stands (path or query). Every error shows the URL with its credentials
// redacted and without its query.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package webhook is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package webhook

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Client tuning: decisions, not settings.
const (
	// maxDialTimeout bounds connecting (TCP and TLS); a smaller request timeout lowers it
	// to that, so an absent endpoint is reported as unreachable, not as timed out.
	maxDialTimeout = 5 * time.Second
	// idlePerRequest is how many idle connections per host are kept for each request a
	// batch may have in flight: several pipelines share a driver.
	idlePerRequest = 4
	// idleTimeout closes a kept connection the endpoint has not used for this long.
	idleTimeout = 90 * time.Second
	// maxURLBytes bounds a resolved URL; servers refuse longer request lines (414), so
	// a topic that makes one longer fails before it is sent.
	maxURLBytes = 8 << 10
)

// Driver posts messages to one endpoint. It is safe for concurrent use.
type Driver struct {
	name       string
	log        *slog.Logger
	url        *template
	batch      bool
	timeout    time.Duration
	conc       int
	maxPayload int
	static     http.Header
	secret     []byte
	sigHeader  string
	now        func() time.Time
	transport  *http.Transport
	client     *http.Client

	// mu is held for reading by every Publish and for writing by Close, so Close waits
	// for the requests in flight and no Publish starts once it began.
	mu     sync.RWMutex
	closed bool
}

var _ router.Driver = (*Driver)(nil)

// New builds the driver named name. It does not connect: the endpoint is first asked
// on the first Publish, so an endpoint that is down does not stop outboxd from
// starting. It fails for options Validate refuses and for TLS files it cannot read.
func New(name string, o Options, logger *slog.Logger) (*Driver, error) {
	fail := func(err error) (*Driver, error) { return nil, fmt.Errorf("http driver %q: %w", name, err) }
	if problems := o.Validate(); len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p
		}
		return fail(errors.Join(errs...))
	}
	t, err := parseTemplate(o.URL)
	if err != nil {
		return fail(err)
	}
	tlsConfig, err := tlsClient(o.TLS)
	if err != nil {
		return fail(err)
	}
	static, _ := staticHeaders(o.Headers, o.SignatureHeader)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dialer := &net.Dialer{Timeout: min(maxDialTimeout, o.Timeout), KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: min(maxDialTimeout, o.Timeout),
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: o.MaxConcurrency * idlePerRequest,
		IdleConnTimeout:     idleTimeout,
	}
	d := &Driver{
		name:       name,
		log:        logger.With("driver", name),
		url:        t,
		batch:      o.Batch,
		timeout:    o.Timeout,
		conc:       o.MaxConcurrency,
		maxPayload: o.MaxPayloadBytes,
		static:     static,
		sigHeader:  http.CanonicalHeaderKey(o.SignatureHeader),
		now:        time.Now,
		transport:  transport,
		client: &http.Client{
			Transport: transport,
			// A redirect is answered to the caller, who fails the message with it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	if o.SigningSecret != "" {
		d.secret = []byte(o.SigningSecret.Reveal())
	}
	return d, nil
}

// Close stops new publishes, waits for those in flight, then closes the idle
// connections. A second Close does nothing.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.transport.CloseIdleConnections()
	d.log.Debug("http driver closed")
	return nil
}

func tlsClient(c driveropt.TLS) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	return c.Client()
}
