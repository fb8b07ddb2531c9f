package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server timeouts: a client must send its headers within ReadHeaderTimeout and its
// whole request within ReadTimeout; WriteTimeout covers the slowest handler (a bounded
// requeue) with room to spare.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 2 * requestTimeout
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// shutdownTimeout is how long in-flight requests may finish after ctx ends.
	shutdownTimeout = 10 * time.Second
)

// Serve listens on addr and serves h until ctx ends, then shuts down gracefully:
// it stops accepting, lets in-flight requests finish for up to 10 seconds and closes
// what remains. It returns nil after a clean shutdown.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("admin: listen on %s (http.addr): %w", addr, err)
	}
	return ServeListener(ctx, ln, h)
}

// ServeListener is Serve on a listener the caller opened (to learn the port of ":0").
// It closes ln.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("admin: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("admin: shut down on %s: %w", ln.Addr(), err), srv.Close())
	}
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("admin: serve on %s: %w", ln.Addr(), serveErr))
	}
	return err
}
