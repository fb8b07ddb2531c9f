package console

// The layout every page shares, and the small pages: login, confirm, done, error.

import (
	"net/http"
	"strconv"
)

// view is what the layout and a page's content read of the session.
type view struct {
	CSRF   string
	Role   string
	CanAct bool
}

// content is one page's content, written into the layout.
type content interface{ write(p *page, v view) }

// render writes the page title with c as status. The page is written whole before
// anything is sent.
func (c *console) render(w http.ResponseWriter, status int, s *session, title string, ct content) {
	var v view
	if s != nil {
		v.CSRF, v.Role, v.CanAct = s.csrf, string(s.role), c.canAct(s)
	}
	var p page
	p.raw("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>outboxd · ")
	p.text(title)
	p.raw("</title>\n<link rel=\"stylesheet\" href=\"/ui/static/style.css\">\n",
		"<script src=\"/ui/static/console.js\" defer></script>\n</head>\n<body>\n<header>\n<strong>outboxd</strong>\n")
	if v.Role != "" {
		p.raw(`<nav><a href="/ui/streams">Streams</a> <a href="/ui/messages">Messages</a> <a href="/ui/replicas">Replicas</a></nav>`, "\n",
			`<form method="post" action="/ui/logout" class="inline">`)
		p.hidden("csrf", v.CSRF)
		p.raw("\n", `<span class="who">`)
		p.text(v.Role)
		if !v.CanAct {
			p.raw(" · read-only")
		}
		p.raw("</span> <button>Log out</button></form>\n")
	}
	p.raw("</header>\n<main>\n")
	ct.write(&p, v)
	p.raw("</main>\n</body>\n</html>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(p.bytes())
}

func (d loginData) write(p *page, _ view) {
	p.raw("<h1>Log in</h1>\n")
	p.errorLine(d.Error)
	p.raw(`<form method="post" action="/ui/login">`, "\n",
		`<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>`, "\n",
		"<button>Log in</button>\n</form>\n",
		`<p class="hint">Paste <code>http.admin_token</code> to act`)
	if d.Mode == "readonly" {
		p.raw(" (this console is read-only)")
	}
	p.raw(", or <code>http.read_token</code> to look.</p>\n")
}

// refusal is the error page's message.
type refusal string

func (msg refusal) write(p *page, _ view) {
	p.raw("<h1>Refused</h1>\n", `<p class="error">`)
	p.text(string(msg))
	p.raw("</p>\n", `<p><a href="/ui/streams">Back to the streams</a></p>`, "\n")
}

func (d doneData) write(p *page, _ view) {
	p.raw("<h1>Done</h1>\n", `<p class="done">`)
	p.text(d.Summary)
	p.raw("</p>\n", `<p><a href="/ui/streams">Back to the streams</a></p>`, "\n")
}

// write shows what the action would change, with the form that does it: the action's
// fields, as given, in hidden fields.
func (d confirmData) write(p *page, v view) {
	a := d.A
	p.raw("<h1>Confirm</h1>\n<p>You asked to <strong>")
	p.text(a.What())
	p.raw("</strong>")
	if a.Outbox != "" {
		p.raw(" in outbox ")
		p.text(a.Outbox)
	}
	p.raw(".</p>\n", `<p class="count">This would change <strong>`)
	p.num(d.Count)
	p.raw("</strong> message(s) now")
	if d.Note != "" {
		p.raw(", ")
		p.text(d.Note)
	}
	p.raw(".</p>\n", `<form method="post" action="/ui/act">`, "\n")
	p.hidden("csrf", v.CSRF)
	p.hidden("action", a.Kind)
	p.hidden("outbox", a.Outbox)
	if a.ID != 0 {
		p.hidden("id", strconv.FormatInt(a.ID, 10))
	}
	p.hidden("stream", a.Stream)
	if a.HasKey {
		p.hidden("key", a.Key)
	}
	p.hidden("since", a.Since)
	p.hidden("until", a.Until)
	p.hiddenSet("topic", a.Topic)
	p.hiddenSet("error", a.Error)
	if a.FromID != 0 {
		p.hidden("from_id", strconv.FormatInt(a.FromID, 10))
	}
	if a.ToID != 0 {
		p.hidden("to_id", strconv.FormatInt(a.ToID, 10))
	}
	p.raw("\n", `<button class="danger">Yes, `)
	p.text(a.Kind)
	p.raw(`</button> <a href="/ui/streams">Cancel</a>`, "\n</form>\n")
}
