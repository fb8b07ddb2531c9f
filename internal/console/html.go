package console

// How the console writes HTML without a template engine (html/template, through
// text/template's MethodByName, keeps every exported method of every reachable type in
// the binary). Safety is in the types, not in each page's care:
//   - Markup written as is has the type markup, which only an untyped constant of this
//     package becomes: a string value does not compile without a conversion, and
//     TestNoValueBecomesMarkupOrALink refuses any conversion to markup, and a page's
//     buffer or a link touched outside this file.
//   - Every value goes through text, attr or hidden, which escape it; the attribute
//     names are constants, and attr refuses the ones that hold a URL, a script or a
//     style.
//   - A URL is a link, made only here: one of the console's own paths (a constant)
//     with a query net/url encodes, or an http(s) URL from the configuration.

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// markup is HTML written as is.
type markup string

// page is an HTML document or fragment being written; only the methods here write
// to its buffer.
type page struct{ html bytes.Buffer }

// escaper escapes text for an element's content or a quoted attribute value, as
// html.EscapeString does, and replaces NUL as html/template did.
var escaper = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;", `"`, "&#34;", `'`, "&#39;", "\x00", "\uFFFD")

// raw writes markup as is.
func (p *page) raw(ms ...markup) {
	for _, m := range ms {
		p.html.WriteString(string(m))
	}
}

// bytes is the page as written.
func (p *page) bytes() []byte { return p.html.Bytes() }

// text writes s as text.
func (p *page) text(s string) { _, _ = escaper.WriteString(&p.html, s) }

// num writes n as text.
func (p *page) num(n int64) { p.html.WriteString(strconv.FormatInt(n, 10)) }

// approx writes n, marked as an estimate when it is one (ops.StreamStats.Approximate).
func (p *page) approx(n int64, estimated bool) {
	if estimated {
		p.raw(`<span class="estimate" title="estimated from a sample of the table">~`)
		p.num(n)
		p.raw("</span>")
		return
	}
	p.num(n)
}

// or writes s as text, or alt when s is empty.
func (p *page) or(s, alt string) {
	if s == "" {
		s = alt
	}
	p.text(s)
}

// attr writes ` name="value"`, value escaped. A URL, script or style attribute is a
// mistake here (href has its own method; the pages carry no script or style), so it
// panics, which any test rendering the page shows.
func (p *page) attr(name markup, value string) {
	switch n := strings.ToLower(string(name)); {
	case strings.HasPrefix(n, "on"), n == "style", n == "href", n == "src", n == "action", n == "formaction",
		n == "srcset", n == "xlink:href", n == "data", n == "poster", n == "background", n == "srcdoc":
		panic("console: attribute " + n + " written with attr")
	}
	p.raw(" ", name, `="`)
	p.text(value)
	p.raw(`"`)
}

// errorLine writes s as the page's error paragraph, or nothing when s is empty.
func (p *page) errorLine(s string) {
	if s != "" {
		p.raw(`<p class="error">`)
		p.text(s)
		p.raw("</p>\n")
	}
}

// hidden writes a hidden form field.
func (p *page) hidden(name markup, value string) {
	p.raw(`<input type="hidden" name="`, name, `"`)
	p.attr("value", value)
	p.raw(">")
}

// hiddenSet writes a hidden form field when value is not empty.
func (p *page) hiddenSet(name markup, value string) {
	if value != "" {
		p.hidden(name, value)
	}
}

// link is a URL a page may link to; only the functions below make one.
type link struct{ s string }

// to links to one of the console's paths, with the query kv (name, value, …) in that
// order, each part escaped by net/url.
func to(path markup, kv ...string) link {
	var b strings.Builder
	b.WriteString(string(path))
	for i := 0; i+1 < len(kv); i += 2 {
		sep := byte('&')
		if i == 0 {
			sep = '?'
		}
		b.WriteByte(sep)
		b.WriteString(url.QueryEscape(kv[i]))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(kv[i+1]))
	}
	return link{b.String()}
}

// toQuery links to one of the console's paths with the query q.
func toQuery(path markup, q url.Values) link {
	return link{string(path) + "?" + q.Encode()}
}

// webLink is s as a link when it is an absolute http or https URL; anything else
// (javascript:, data:, a relative path) is none, as html/template's URL filter would
// have refused it.
func webLink(s string) (link, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return link{}, false
	}
	return link{u.String()}, true
}

// set says l is a link, not the zero value.
func (l link) set() bool { return l.s != "" }

// href writes ` href="…"` for l.
func (p *page) href(l link) {
	p.raw(` href="`)
	p.text(l.s)
	p.raw(`"`)
}

// age is a duration in seconds, rounded, or a dash when there is none.
func age(sec float64) string {
	if sec <= 0 {
		return "—"
	}
	return time.Duration(sec * float64(time.Second)).Round(time.Second).String()
}

// when is a time in UTC to the millisecond, or a dash when there is none.
func when(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// whenAt is when for a time whose zero value means none.
func whenAt(t time.Time) string {
	if t.IsZero() {
		return when(nil)
	}
	return when(&t)
}

// rate is messages per second, one decimal below ten.
func rate(r float64) string {
	if r < 10 {
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

// deref is *n, or 0.
func deref(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}
