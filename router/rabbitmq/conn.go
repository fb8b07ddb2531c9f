package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router/driveropt"
)

const (
	// heartbeat is the interval the client proposes; a dead peer is noticed within
	// about three of them even when nothing is being published.
	heartbeat = 10 * time.Second
	// keepAlive is the TCP keep-alive period of the socket.
	keepAlive = 30 * time.Second
)

// dialer holds what connecting needs, every file already read, so that a reconnect can
// fail only on the network or the broker's answer.
type dialer struct {
	name  string
	url   string // as configured: may hold credentials, never shown
	shown string // url with its password redacted
	vhost string
	auth  []amqp.Authentication // nil: the URL's credentials
	tls   *tls.Config           // nil unless the URL is amqps
}

func newDialer(name string, o Options) (*dialer, error) {
	shown := driveropt.RedactURL(o.URL, driveropt.Mask, false)
	if msg := urlProblem(o.URL); msg != "" {
		return nil, fmt.Errorf("url %s: %s", driveropt.Quote(shown), msg)
	}
	uri, err := amqp.ParseURI(o.URL)
	if err != nil {
		// Its text may quote the URL, password and all.
		return nil, fmt.Errorf("url %s: not an AMQP URI", driveropt.Quote(shown))
	}
	d := &dialer{name: name, url: o.URL, shown: shown, vhost: o.Vhost}
	if o.Username != "" {
		d.auth = []amqp.Authentication{&amqp.PlainAuth{Username: o.Username, Password: o.Password.Reveal()}}
	}
	if uri.Scheme == "amqps" {
		if d.tls, err = tlsConfig(o.TLS); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// tlsConfig builds the TLS client configuration, reading every file now. Without
// tls.enabled an amqps URL verifies the server against the system's roots.
func tlsConfig(t driveropt.TLS) (*tls.Config, error) {
	if !t.Enabled {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	return t.Client()
}

// dial opens a connection, TCP, TLS and AMQP handshakes bounded by ctx: its deadline
// is the socket's until the handshake is done, and its cancellation cuts the socket.
// It returns the socket too, through which a publish corks its batch.
func (d *dialer) dial(ctx context.Context) (*amqp.Connection, *corkConn, error) {
	var sock atomic.Pointer[corkConn]
	cfg := amqp.Config{
		Vhost:      d.vhost,
		Heartbeat:  heartbeat,
		Properties: amqp.NewConnectionProperties(),
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{KeepAlive: keepAlive}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if dl, ok := ctx.Deadline(); ok {
				// The library clears the deadline once the handshake is done.
				if err := c.SetDeadline(dl); err != nil {
					c.Close()
					return nil, err
				}
			}
			cc := &corkConn{Conn: c}
			sock.Store(cc)
			return cc, nil
		},
	}
	cfg.Properties.SetClientConnectionName("outboxd/" + d.name)
	if d.tls != nil {
		cfg.TLSClientConfig = d.tls.Clone() // the library writes ServerName into it
	}
	if d.auth != nil {
		// A fresh copy: the library zeroes the password it was given once connected.
		pa := *d.auth[0].(*amqp.PlainAuth)
		cfg.SASL = []amqp.Authentication{&pa}
	}
	stop := context.AfterFunc(ctx, func() {
		if c := sock.Load(); c != nil {
			_ = c.SetDeadline(time.Unix(1, 0)) // unblocks the handshake at once
		}
	})
	conn, err := amqp.DialConfig(d.url, cfg)
	if !stop() && err == nil {
		// ctx ended while the handshake finished: the deadline may have cut the socket.
		conn.Close()
		return nil, nil, ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, nil, scrub(err, d.url)
	}
	return conn, sock.Load(), nil
}

// scrub keeps a URL out of an error's text: the library quotes it in a few parse errors.
func scrub(err error, url string) error {
	if strings.Contains(err.Error(), url) {
		return errors.New("the url is not usable")
	}
	return err
}

// corkMax bounds what a corked socket holds before it writes anyway, so that a batch of
// large messages is not copied whole into memory.
const corkMax = 256 << 10

// corkConn is the socket under the AMQP connection. The library writes every message
// to it on its own; while a publish corks it, those writes are gathered and go out in
// one write when it is uncorked, so a batch costs one system call on each side instead
// of one per message. Other writers during a cork (a heartbeat, another channel's RPC)
// wait in the buffer only until the batch is written.
type corkConn struct {
	net.Conn
	mu    sync.Mutex
	corks int
	buf   []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corks == 0 {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= corkMax {
		return len(p), c.flushLocked()
	}
	return len(p), nil
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corks++
	c.mu.Unlock()
}

// uncork ends a cork, writing what was gathered once no publish holds one.
func (c *corkConn) uncork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corks--
	if c.corks == 0 {
		_ = c.flushLocked()
	}
}

// flushLocked writes the buffer. The library was told its writes succeeded, so a failure
// closes the socket: its reader then fails, and every message awaiting a confirm on the
// connection fails as the connection lost.
func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		_ = c.Close()
	}
	return err
}
