package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Access is what a route asks of a request before its handler runs.
type Access string

const (
	// Open routes answer anyone: probes and metrics, which orchestrators and scrapers
	// call without a token.
	Open Access = "open"
	// Read routes need http.read_token or http.admin_token once either is configured,
	// and are open while neither is.
	Read Access = "read"
	// Admin routes change rows: they need http.admin_token, and are refused (403) while
	// none is configured.
	Admin Access = "admin"
)

// Route is one endpoint the handler serves.
type Route struct {
	Method string
	Path   string
	Access Access
}

// routes is every endpoint, in the order the 404 answer names them. The access of each
// is declared here, beside its path, so that a new route cannot forget to ask for one.
var routes = []Route{
	{http.MethodGet, "/healthz", Open},
	{http.MethodGet, "/readyz", Open},
	{http.MethodGet, "/metrics", Open},
	{http.MethodGet, "/api/v1/stats", Read},
	{http.MethodGet, "/api/v1/messages", Read},
	{http.MethodPost, "/api/v1/messages/requeue", Admin},
	{http.MethodPost, "/api/v1/messages/skip", Admin},
	{http.MethodPost, "/api/v1/messages/replay", Admin},
}

// Routes returns every endpoint the handler serves, with what each asks of a request.
func Routes() []Route { return slices.Clone(routes) }

// tokens holds the SHA-256 digests of the configured tokens; the tokens themselves are
// not kept past New.
type tokens struct {
	adminSet, readSet   bool
	adminHash, readHash [sha256.Size]byte
}

func newTokens(adminToken, readToken string) tokens {
	var t tokens
	if adminToken != "" {
		t.adminSet, t.adminHash = true, sha256.Sum256([]byte(adminToken))
	}
	if readToken != "" {
		t.readSet, t.readHash = true, sha256.Sum256([]byte(readToken))
	}
	return t
}

// guard answers every request to an /api/ route that its access refuses, or whose
// query string does not parse, before h runs.
func (s *server) guard(need Access, h http.Handler) http.Handler {
	if need == Open {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.admit(need, w, r) {
			return
		}
		// r.URL.Query() drops the pairs it cannot parse and the error with them: a
		// filter holding ';' would silently become no filter. Refuse the whole query.
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			s.fail(w, r, badRequest("the query string does not parse: %v; separate parameters with & and percent-encode ; %% and spaces", err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// admit decides whether a request may reach a route needing need, and answers the
// refusal itself. A presented bearer token is hashed and compared with both configured
// digests in constant time, both comparisons always made, so neither the token's
// content, its length, nor which token it came close to shows in the timing.
func (s *server) admit(need Access, w http.ResponseWriter, r *http.Request) bool {
	t := s.tokens
	switch {
	case need == Admin && !t.adminSet:
		writeError(w, http.StatusForbidden, "mutation is disabled: no http.admin_token is configured "+
			"(set OUTBOXD_HTTP__ADMIN_TOKEN to enable requeue and skip over HTTP)")
		return false
	case need == Read && !t.adminSet && !t.readSet:
		return true // documented: with no token configured, reads are open (docs/security.md)
	}
	wanted := "http.admin_token"
	if need == Read {
		wanted = acceptedTokens(t)
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
		writeError(w, http.StatusUnauthorized, "this endpoint needs the header Authorization: Bearer <"+wanted+">")
		return false
	}
	got := sha256.Sum256([]byte(token))
	adminMatch := subtle.ConstantTimeCompare(got[:], t.adminHash[:])
	readMatch := subtle.ConstantTimeCompare(got[:], t.readHash[:])
	isAdmin := t.adminSet && adminMatch == 1
	isRead := t.readSet && readMatch == 1
	switch {
	case isAdmin, isRead && need == Read:
		return true
	case isRead:
		s.log.Warn("write with the read token refused", "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, "the read token cannot change anything: this endpoint needs http.admin_token")
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd", error="invalid_token"`)
	s.log.Warn("admin request with a wrong token refused", "path", r.URL.Path, "remote", r.RemoteAddr)
	writeError(w, http.StatusUnauthorized, "the bearer token does not match "+wanted)
	return false
}

// acceptedTokens names the configured tokens a read accepts.
func acceptedTokens(t tokens) string {
	switch {
	case t.adminSet && t.readSet:
		return "http.read_token or http.admin_token"
	case t.readSet:
		return "http.read_token"
	}
	return "http.admin_token"
}
