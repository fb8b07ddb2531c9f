package console

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// cookieName names the session cookie; its value is the session id, nothing else.
const cookieName = "outboxd_ui"

// maxSessions bounds the session map: logging in again and again evicts the oldest
// rather than growing without end.
const maxSessions = 1000

// session is one login: a random id (the cookie), a random CSRF token its forms carry,
// what it may do, and when it ends.
type session struct {
	id, csrf string
	role     role
	expires  time.Time
}

type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	now func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, ttl: ttl, now: now}
}

// randomID returns 32 bytes from the system's random source, base64url-encoded.
func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// start records a new session for r and returns it, dropping expired ones and, past
// maxSessions, the one ending soonest.
func (ss *sessions) start(r role) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	var soonest *session
	for id, s := range ss.m {
		if !now.Before(s.expires) {
			delete(ss.m, id)
		} else if soonest == nil || s.expires.Before(soonest.expires) {
			soonest = s
		}
	}
	if len(ss.m) >= maxSessions && soonest != nil {
		delete(ss.m, soonest.id)
	}
	s := &session{id: randomID(), csrf: randomID(), role: r, expires: now.Add(ss.ttl)}
	ss.m[s.id] = s
	return s
}

// get returns the live session r's cookie names, or nil.
func (ss *sessions) get(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[ck.Value]
	if s == nil {
		return nil
	}
	if !ss.now().Before(s.expires) {
		delete(ss.m, s.id)
		return nil
	}
	return s
}

func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, s.id)
}

// setCookie hands the browser the session's id: HttpOnly (no script reads it),
// SameSite=Strict (no other site's page sends it), Secure when the request came over
// TLS (directly, or at a proxy that says so in X-Forwarded-Proto: a Secure cookie is
// never weaker), and scoped to the console's path.
func setCookie(w http.ResponseWriter, r *http.Request, s *session, maxAge int) {
	value := ""
	if s != nil {
		value = s.id
	}
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // Secure whenever TLS is in the path: the admin listener itself speaks plain HTTP
		Name: cookieName, Value: value, Path: "/ui", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
	})
}

func (c *console) loginForm(w http.ResponseWriter, r *http.Request) {
	if c.sessions.get(r) != nil {
		http.Redirect(w, r, "/ui/streams", http.StatusSeeOther)
		return
	}
	c.render(w, http.StatusOK, nil, "login", loginData{Mode: c.opt.Mode})
}

type loginData struct {
	Mode  string
	Error string
}

// login starts a session for the token posted in the form. A wrong token is logged
// (rate-limited by the time an operator takes to type one) and answered 401.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !sameOrigin(r) {
		c.fail(w, r, nil, http.StatusForbidden, "this form was sent from another site: refused")
		return
	}
	role, ok := c.checkToken(r.PostFormValue("token"))
	if !ok {
		c.log.Warn("console login with a wrong token refused", "remote", r.RemoteAddr)
		c.render(w, http.StatusUnauthorized, nil, "login", loginData{Mode: c.opt.Mode,
			Error: "that token is neither http.admin_token nor http.read_token"})
		return
	}
	s := c.sessions.start(role)
	setCookie(w, r, s, int(c.sessions.ttl/time.Second))
	c.log.Info("console login", "by", string(role), "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/streams", http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	c.sessions.end(s)
	setCookie(w, r, nil, -1)
	c.log.Info("console logout", "by", string(s.role), "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
