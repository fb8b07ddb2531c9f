// Package admin is outboxd's HTTP edge, internal to outboxd: health and readiness
// probes, metrics, and the operators' API. The API's endpoints (stats, message listing,
// requeue, skip, replay) are thin adapters over internal/ops, which the CLI (`outboxd stats`,
// `messages`, `requeue`, `skip`) shares: this package decodes a request into an ops
// request, encodes the ops result as it is, and maps the ops errors to statuses in one
// place (fail). It never reads or changes messages but through ops.
//
// Invariants: nothing changes through HTTP unless an admin token is configured and the
// request presents it; once any token is configured, nothing under /api/ is answered to
// a request that presents neither (tokens compared as digests, in constant time); a
// query string that does not parse is refused, never read as no filter; no response
// carries a secret, since drivers are described from their configuration with
// credentials stripped; and every error is JSON, {"error": "…"}, naming what is wrong.
package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/store"
)

// Store is what the admin endpoints need from the database: the operations' store and
// the readiness probes.
type Store interface {
	ops.Store
	SchemaVersion(ctx context.Context) (version uint, dirty bool, err error)
}

var _ Store = (*store.Store)(nil)

// Options configures the handler. Store, or Outboxes, is required; everything else may
// be zero.
type Options struct {
	// Store, Streams, Drivers, Breakers and Ready describe the one outbox table of a
	// replica without an outboxes list; Outboxes, when set, replaces them.
	Store Store
	// Outboxes lists the outboxes of a replica serving several: the API then takes an
	// outbox selector, and /readyz checks each.
	Outboxes []Outbox
	// Streams and Drivers are the configured ones, as Describe returns them.
	Streams []ops.Stream
	Drivers []ops.Driver
	// AdminToken admits every /api/ request; empty disables the mutating endpoints.
	AdminToken config.Secret
	// ReadToken admits /api/ reads only. With either token set, reads need one.
	ReadToken config.Secret
	// Ready lists readiness checks beyond the built-in database and schema checks
	// (the wiring adds the notification listener). A broker being down is not a
	// readiness failure: it is a per-stream state, shown in stats.
	Ready []Check
	// Metrics serves GET /metrics; nil answers 404.
	Metrics http.Handler
	// Breakers returns each stream's circuit-breaker state (closed, open, half-open);
	// nil leaves the state out of stats.
	Breakers func() map[string]string
	Logger   *slog.Logger
	// Now is the clock relative times ("since=2h") are counted back from; nil is
	// time.Now.
	Now func() time.Time
}

// Check is one readiness check: Probe returns nil when ready, or why not.
type Check struct {
	Name  string
	Probe func(ctx context.Context) error
}

// maxBodyBytes caps a request body.
const maxBodyBytes = 1 << 20

// requestTimeout bounds the database work of one request.
const requestTimeout = 30 * time.Second

type server struct {
	opt      Options
	outboxes []served
	// multi is set for an outboxes list: answers name their outbox.
	multi  bool
	tokens tokens
	log    *slog.Logger
}

// New returns the handler for every endpoint. It panics without a Store, a wiring
// mistake rather than a runtime condition.
func New(opt Options) http.Handler {
	if opt.Store == nil && len(opt.Outboxes) == 0 {
		panic("admin: Options.Store or Options.Outboxes is required")
	}
	s := &server{opt: opt, outboxes: outboxesOf(opt), multi: len(opt.Outboxes) > 0, log: opt.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "admin")
	s.tokens = newTokens(opt.AdminToken.Reveal(), opt.ReadToken.Reveal())
	s.opt.AdminToken, s.opt.ReadToken = "", "" // not needed past this point

	handlers := map[string]http.HandlerFunc{
		"/healthz": s.healthz, "/readyz": s.readyz, "/metrics": s.metrics,
		"/api/v1/stats": s.stats, "/api/v1/messages": s.messages,
		"/api/v1/messages/requeue": s.requeue, "/api/v1/messages/skip": s.skip,
		"/api/v1/messages/replay": s.replay,
	}
	mux := http.NewServeMux()
	paths := make([]string, len(routes))
	for i, rt := range routes {
		if handlers[rt.Path] == nil {
			panic("admin: no handler for route " + rt.Path)
		}
		mux.Handle(rt.Path, only(rt.Method, s.guard(rt.Access, handlers[rt.Path])))
		paths[i] = rt.Path
	}
	notFound := "no endpoint %s: see " + strings.Join(paths, ", ")
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf(notFound, r.URL.Path))
	})
	return mux
}

// only answers 405 with a JSON error to any method but m (and HEAD for GET).
func only(m string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && (m != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path+"; use "+m)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.opt.Metrics == nil {
		writeError(w, http.StatusNotFound, "metrics are not served by this process")
		return
	}
	s.opt.Metrics.ServeHTTP(w, r)
}
