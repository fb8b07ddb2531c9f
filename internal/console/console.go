// Package console is outboxd's web console for operators, served by `outboxd run` at
// /ui/ on the admin address when http.ui is on or readonly: the streams at a glance,
// a filtered message listing, one message opened, the replicas at work, and the
// actions requeue, skip and replay, of one message or of a filter's whole result,
// behind a confirmation that shows what they would change.
//
// Invariants:
//   - Every read and every action goes through internal/ops, the one implementation
//     (and validation) the HTTP API and the CLI share; this package holds no SQL.
//   - Nothing renders user data unescaped: pages are written in Go (html.go), where a
//     value reaches a page only escaped, as text or a quoted attribute value; markup
//     written as is is only ever a constant; a link is a console path with a query
//     net/url encodes, or an http(s) URL. No html/template: it keeps every exported
//     method in the binary. Pages forbid inline script and framing (CSP).
//   - No page without a session, and no action without a valid session, its CSRF token
//     (compared in constant time) and the admin token behind the session while the mode
//     is on. A session is a random id in an HttpOnly, SameSite=Strict cookie, kept
//     server-side with an expiry; the token itself is read once from a POSTed form,
//     compared as a digest, and never kept, echoed, or put in a URL.
package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/ops"
)

// Outbox is one outbox the console shows. Store is nil while the replica has not
// reached its database yet.
type Outbox struct {
	Name    string
	Store   ops.Store
	Streams []ops.Stream
	// Breakers returns each stream's breaker state; nil leaves the states out.
	Breakers func() map[string]string
	// Activity counts the streams' recent throughput and dead-lettered messages on
	// this replica; nil leaves them out.
	Activity *Activity
}

// Options configures the console. Mode, a token the mode allows to log in, and
// Outboxes are required.
type Options struct {
	// Mode is config.UIOn (actions with the admin token) or config.UIReadonly.
	Mode       string
	AdminToken config.Secret
	ReadToken  config.Secret
	// Outboxes returns the outboxes as they are now; it is called on every request, as
	// a replica connects its outboxes one by one.
	Outboxes func() []Outbox
	Logger   *slog.Logger
	// Now is the clock for sessions and relative times; nil is time.Now.
	Now func() time.Time
	// SessionTTL is how long a login lasts; zero is 8 hours.
	SessionTTL time.Duration
	// TraceURL, when set, is tracing.ui_url: a message's trace id links there.
	TraceURL string
	// Version and Started describe the replica serving the console (the replicas page).
	Version string
	Started time.Time
}

// Prefix is where the console is served.
const Prefix = "/ui/"

// requestTimeout bounds the database work of one page or action.
const requestTimeout = 30 * time.Second

// replayBudget is how long one replay action copies before it answers; a replay still
// running then is resumed from the API or the CLI with its id.
const replayBudget = 15 * time.Second

//go:embed static
var staticFS embed.FS

type console struct {
	opt                 Options
	log                 *slog.Logger
	now                 func() time.Time
	sessions            *sessions
	adminSet, readSet   bool
	adminHash, readHash [sha256.Size]byte
}

// New returns the console's handler for every path under Prefix. It panics on a
// configuration config.Validate refuses (no token for the mode), a wiring mistake.
func New(opt Options) http.Handler {
	c := &console{opt: opt, log: opt.Logger, now: opt.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("component", "console")
	if c.now == nil {
		c.now = time.Now
	}
	if opt.AdminToken != "" {
		c.adminSet, c.adminHash = true, sha256.Sum256([]byte(opt.AdminToken.Reveal()))
	}
	if opt.ReadToken != "" {
		c.readSet, c.readHash = true, sha256.Sum256([]byte(opt.ReadToken.Reveal()))
	}
	c.opt.AdminToken, c.opt.ReadToken = "", ""
	switch {
	case opt.Mode == config.UIOn && !c.adminSet,
		opt.Mode == config.UIReadonly && !c.adminSet && !c.readSet:
		panic("console: mode " + opt.Mode + " without the token it logs in with")
	case opt.Mode != config.UIOn && opt.Mode != config.UIReadonly:
		panic("console: mode " + opt.Mode + " serves nothing")
	case opt.Outboxes == nil:
		panic("console: Options.Outboxes is required")
	}
	ttl := opt.SessionTTL
	if ttl == 0 {
		ttl = 8 * time.Hour
	}
	c.sessions = newSessions(ttl, c.now)

	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", c.loginForm)
	mux.HandleFunc("POST /ui/login", c.login)
	mux.Handle("POST /ui/logout", c.need(read, c.logout))
	mux.Handle("GET /ui/{$}", http.RedirectHandler("/ui/streams", http.StatusSeeOther))
	mux.Handle("GET /ui/streams", c.need(read, c.streams))
	mux.Handle("GET /ui/streams/table", c.need(read, c.streamsTable))
	mux.Handle("GET /ui/messages", c.need(read, c.messages))
	mux.Handle("GET /ui/message", c.need(read, c.message))
	mux.Handle("GET /ui/replicas", c.need(read, c.replicas))
	mux.Handle("POST /ui/confirm", c.need(act, c.confirm))
	mux.Handle("POST /ui/act", c.need(act, c.act))
	return secure(mux)
}

// secure sets the headers every console answer carries: no caching of pages that show
// messages, no framing, no script or style but the console's own files.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: under no-referrer a browser sends "Origin: null"
		// with the console's own forms, which sameOrigin would refuse.
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// role is what a session may do, from the token it logged in with.
type role string

const (
	read role = "read"
	act  role = "admin"
)

// checkToken says which token tok is, comparing digests in constant time, both
// comparisons always made.
func (c *console) checkToken(tok string) (role, bool) {
	got := sha256.Sum256([]byte(tok))
	isAdmin := c.adminSet && subtle.ConstantTimeCompare(got[:], c.adminHash[:]) == 1
	isRead := c.readSet && subtle.ConstantTimeCompare(got[:], c.readHash[:]) == 1
	switch {
	case isAdmin:
		return act, true
	case isRead:
		return read, true
	}
	return "", false
}

// canAct reports whether s may change messages.
func (c *console) canAct(s *session) bool {
	return s != nil && s.role == act && c.opt.Mode == config.UIOn
}

type ctxKey struct{}

// need admits a request with a live session, and, for a POST, the session's CSRF
// token and a same-origin Origin header; for act, a session that may change messages.
// A request without a session goes to the login page (a page) or gets 401 (the
// refreshing fragment).
func (c *console) need(want role, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := c.sessions.get(r)
		if s == nil {
			if r.Method == http.MethodGet && r.URL.Path != "/ui/streams/table" {
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, http.StatusUnauthorized, "your session has ended: log in again")
			return
		}
		if r.Method == http.MethodPost {
			if !sameOrigin(r) {
				c.log.Warn("console post from another origin refused", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
				c.fail(w, r, s, http.StatusForbidden, "this form was sent from another site: refused")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				c.log.Warn("console post without its CSRF token refused", "path", r.URL.Path, "by", string(s.role), "remote", r.RemoteAddr)
				c.fail(w, r, s, http.StatusForbidden, "this form is stale or was not sent by the console (CSRF token missing or wrong): reload the page and try again")
				return
			}
		}
		if want == act && !c.canAct(s) {
			why := "this session logged in with the read token: log in with http.admin_token to change messages"
			if c.opt.Mode != config.UIOn {
				why = "the console is read-only (http.ui: readonly): use the API or the CLI to change messages"
			}
			c.fail(w, r, s, http.StatusForbidden, why)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)))
	})
}

// sameOrigin refuses a POST whose Origin header names another host. Browsers send
// Origin on every POST; its absence (an old client, curl) leaves the CSRF token alone
// to decide.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(ctxKey{}).(*session)
	return s
}

// statusOf maps an ops error to a status: the operator's mistake, nothing to change,
// or a failure of the database.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ops.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ops.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
