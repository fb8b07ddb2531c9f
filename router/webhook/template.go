package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/outboxd/outboxd/router/driveropt"
)

// placeholder is the one thing a URL template may hold in braces.
const placeholder = "{topic}"

// template is a validated endpoint URL in which placeholder stands for the topic.
type template struct {
	path, query string // the URL up to its query, and its query ("?…" or "")
	hasTopic    bool
	https       bool
	origin      string // scheme://userinfo@host/, what a probe asks
}

// parseTemplate validates raw: it must parse as an http or https URL with a host, and
// {topic} may stand only in its path or query. Its errors never quote credentials.
func parseTemplate(raw string) (*template, error) {
	shown := driveropt.RedactURL(raw, driveropt.Mask, true)
	if err := bracesProblem(shown); err != nil {
		return nil, err
	}
	// Parse with the placeholder filled in, as a topic would fill it.
	u, err := url.Parse(strings.ReplaceAll(raw, placeholder, "topic"))
	if err != nil {
		return nil, errors.New(driveropt.URLParseProblem(strings.ReplaceAll(raw, placeholder, "topic"), true))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("want an http:// or https:// URL, got scheme %s", driveropt.Quote(u.Scheme))
	case u.Host == "":
		return nil, errors.New("no host")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, errors.New("a fragment (#…) is never sent; remove it")
	}
	// The authority is everything between "//" and the path or query; a topic there
	// would choose the server, not the resource.
	rest := raw[strings.Index(raw, "//")+2:]
	authority := rest
	if end := strings.IndexAny(rest, "/?"); end >= 0 {
		authority = rest[:end]
	}
	if strings.Contains(authority, placeholder) {
		return nil, fmt.Errorf("%s may stand only in the path or the query, not in the host or user information", placeholder)
	}
	t := &template{path: raw, hasTopic: strings.Contains(raw, placeholder), https: u.Scheme == "https"}
	if q := strings.IndexByte(raw, '?'); q >= 0 {
		t.path, t.query = raw[:q], raw[q:]
	}
	origin := *u
	origin.Path, origin.RawPath, origin.RawQuery = "/", "", ""
	t.origin = origin.String()
	return t, nil
}

// bracesProblem reports braces other than {topic} in the URL as shown (credentials
// redacted), so that a misspelt placeholder is not sent as a literal path.
func bracesProblem(shown string) error {
	s := strings.ReplaceAll(shown, placeholder, "")
	i := strings.IndexAny(s, "{}")
	if i < 0 {
		return nil
	}
	bad := s[i:]
	if end := strings.IndexByte(bad, '}'); end >= 0 {
		bad = bad[:end+1]
	}
	return fmt.Errorf("only %s is replaced in the url; found %s", placeholder, driveropt.Quote(bad))
}

// resolve returns the URL for topic: path-escaped in the path, query-escaped in the
// query, so a topic holding "/" or "&" stays one segment or one value.
func (t *template) resolve(topic string) string {
	if !t.hasTopic {
		return t.path + t.query
	}
	return strings.ReplaceAll(t.path, placeholder, url.PathEscape(topic)) +
		strings.ReplaceAll(t.query, placeholder, url.QueryEscape(topic))
}

// shown is a URL fit for a message: credentials redacted, the query (which may hold
// an access key) left out.
func shown(u string) string {
	s := driveropt.RedactURL(u, driveropt.Mask, true)
	if q := strings.IndexByte(s, '?'); q >= 0 {
		s = s[:q] + "?…"
	}
	return s
}
