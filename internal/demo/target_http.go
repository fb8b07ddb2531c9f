package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/webhook"
)

// httpTarget is an HTTP endpoint in the demo's own process, posted to one message per
// request (the http driver's default). It counts a message before it answers 204, and
// answers 503 while nobody reads, so that the driver retries rather than confirms what
// was not counted.
type httpTarget struct {
	srv     *http.Server
	url     string
	receive atomic.Pointer[func(string)]
}

func openHTTP(context.Context, Options, targetEnv) (target, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen for the http driver: %w", err)
	}
	t := &httpTarget{url: "http://" + ln.Addr().String() + "/demo/{topic}"}
	t.srv = &http.Server{Handler: http.HandlerFunc(t.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

func (t *httpTarget) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	receive := t.receive.Load()
	if receive == nil {
		http.Error(w, "nobody is reading yet", http.StatusServiceUnavailable)
		return
	}
	(*receive)(r.Header.Get(router.HeaderMessageID))
	w.WriteHeader(http.StatusNoContent)
}

func (t *httpTarget) driver() (config.Driver, string) {
	h := webhook.DefaultOptions()
	h.URL = t.url
	return config.Driver{Type: webhook.Type, Options: h}, demoSubjectPrefix
}

func (t *httpTarget) consume(_ context.Context, receive func(string)) (func(), error) {
	t.receive.Store(&receive)
	return func() { t.receive.Store(nil) }, nil
}

// absorbed is 0: the endpoint keeps, and counts, every copy it is sent.
func (t *httpTarget) absorbed(*app.Dispatcher) func() int64 { return func() int64 { return 0 } }

func (t *httpTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.srv.Shutdown(ctx)
}
