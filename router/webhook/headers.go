package webhook

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// HeaderTopic carries the message's topic on every request of per-message mode, so that
// an endpoint whose URL has no {topic} still learns it.
const HeaderTopic = "Outbox-Topic"

// The headers the driver writes itself; a producer header of the same name (in any
// case) is replaced, and a static header may not take one.
var ownHeaders = []string{router.HeaderID, router.HeaderStream, router.HeaderMessageID, router.HeaderKey, HeaderTopic, "Content-Type"}

// framingHeaders describe the HTTP connection or the request's framing, not the
// message: net/http writes or drops them itself, so a message carrying one would not
// arrive as sent.
var framingHeaders = []string{"Connection", "Content-Length", "Expect", "Host", "Keep-Alive", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// nameSymbols are the bytes of an HTTP token (RFC 9110, 5.6.2) other than letters and
// digits: what a header name may hold.
const nameSymbols = "!#$%&'*+-.^_`|~"

// nameProblem says why name cannot be an HTTP header name, or "".
func nameProblem(name string) string {
	if name == "" {
		return "an empty header name"
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(nameSymbols, b) >= 0) {
			return fmt.Sprintf("header name %s holds %q at byte %d, which an HTTP header name cannot", driveropt.Quote(name), b, i+1)
		}
	}
	return ""
}

// badValueByte returns the position (from 1) of the first byte an HTTP header value
// cannot carry (a control character other than tab), or 0. The value itself is never
// quoted: it may be a token.
func badValueByte(v string) (int, byte) {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return i + 1, b
		}
	}
	return 0, 0
}

// valueProblem says why v cannot be the value of the header called what, or "".
func valueProblem(what, v string) string {
	if at, b := badValueByte(v); at > 0 {
		return fmt.Sprintf("%s holds %q at byte %d, which an HTTP header cannot carry", what, b, at)
	}
	return ""
}

// framing reports whether the canonical name is a framing header.
func framing(canonical string) bool { return slices.Contains(framingHeaders, canonical) }

// staticHeaders parses the configured "Name: value" headers into the header every
// request starts from, and lists what is wrong with them.
func staticHeaders(lines []string, signature string) (http.Header, []string) {
	h := make(http.Header, len(lines))
	var problems []string
	for i, line := range lines {
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		canonical := http.CanonicalHeaderKey(name)
		problem := ""
		switch {
		case !ok:
			problem = "want \"Name: value\", got no colon"
		case nameProblem(name) != "":
			problem = nameProblem(name)
		case valueProblem("the value of "+name, value) != "":
			problem = valueProblem("the value of "+name, value)
		case framing(canonical):
			problem = fmt.Sprintf("%s describes the connection, which net/http manages; it cannot be set", canonical)
		case slices.Contains(ownHeaders, canonical):
			problem = fmt.Sprintf("%s is written by the driver for every message", canonical)
		case canonical == http.CanonicalHeaderKey(signature):
			problem = fmt.Sprintf("%s carries the signature (signature_header)", canonical)
		case h[canonical] != nil:
			problem = fmt.Sprintf("%s is set twice", canonical)
		}
		if problem != "" {
			problems = append(problems, fmt.Sprintf("item %d: %s", i+1, problem))
			continue
		}
		h[canonical] = []string{value}
	}
	return h, problems
}

// signatureHeaderProblem says why name cannot carry the signature, or "".
func signatureHeaderProblem(name string) string {
	if msg := nameProblem(name); msg != "" {
		return msg
	}
	canonical := http.CanonicalHeaderKey(name)
	if framing(canonical) || slices.Contains(ownHeaders, canonical) {
		return fmt.Sprintf("%s is a header the driver or net/http writes; choose another name", canonical)
	}
	return ""
}
