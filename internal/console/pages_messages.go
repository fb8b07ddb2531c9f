package console

// The message listing with its filter and bulk actions, and one message opened.

import (
	"slices"
	"strconv"
)

func (d messagesData) write(p *page, v view) {
	q := d.Query
	p.raw("<h1>Messages</h1>\n", `<form method="get" action="/ui/messages" class="filter">`, "\n")
	if len(d.Outboxes) > 1 {
		p.raw(`<label>Outbox <select name="outbox">`)
		options(p, d.Outboxes, d.Outbox)
		p.raw("</select></label>\n")
	}
	p.raw(`<label>Stream <input name="stream"`)
	p.attr("value", q.Stream)
	p.raw("></label>\n", `<label>Status <select name="status"><option value="">any</option>`)
	options(p, d.Statuses, q.Status)
	p.raw("</select></label>\n", `<label>Since <input name="since"`)
	p.attr("value", q.Since)
	p.raw(` placeholder="2h or RFC 3339"></label>`, "\n", `<label>Until <input name="until"`)
	p.attr("value", q.Until)
	p.raw(` placeholder="RFC 3339"></label>`, "\n", `<label>Key <input name="key"`)
	p.attr("value", q.Key)
	p.raw("></label>\n", `<label>Topic <input name="topic"`)
	p.attr("value", q.Topic)
	p.raw("></label>\n", `<label>Ids <input name="from_id"`)
	p.attr("value", q.FromID)
	p.raw(` placeholder="from" size="8"> – <input name="to_id"`)
	p.attr("value", q.ToID)
	p.raw(` placeholder="to" size="8"></label>`, "\n", `<label>Error contains <input name="error"`)
	p.attr("value", q.Error)
	p.raw("></label>\n<button>List</button>\n</form>\n")
	p.errorLine(d.Error)
	if d.Short {
		p.raw(`<p class="note">Scanned `)
		p.num(d.Page.Scanned)
		p.raw(" rows, more may match — narrow the filter (stream, status, ids) or go on to the next page.</p>\n")
	}
	if v.CanAct && q.Stream != "" {
		d.actions(p, v)
	}
	p.raw("<table>\n<thead><tr><th>Id</th><th>Stream</th><th>Topic</th><th>Key</th><th>Status</th><th>Attempts</th>",
		"<th>Created</th><th>Bytes</th><th>Last error</th></tr></thead>\n<tbody>\n")
	for _, m := range d.Page.Messages {
		p.raw("<tr>\n<td><a")
		p.href(to("/ui/message", "outbox", d.Outbox, "id", strconv.FormatInt(m.ID, 10)))
		p.raw(">")
		p.num(m.ID)
		p.raw("</a></td>\n<td>")
		p.text(m.Stream)
		p.raw("</td><td>")
		p.text(m.Topic)
		p.raw("</td><td>")
		p.text(m.Key)
		p.raw("</td><td")
		p.attr("class", "status-"+m.Status)
		p.raw(">")
		p.text(m.Status)
		p.raw("</td>\n", `<td class="num">`)
		p.num(int64(m.Attempts))
		p.raw("</td><td>")
		p.text(whenAt(m.CreatedAt))
		p.raw(`</td><td class="num">`)
		p.num(m.PayloadBytes)
		p.raw(`</td><td class="err">`)
		p.text(m.LastError)
		p.raw("</td>\n</tr>\n")
	}
	if len(d.Page.Messages) == 0 {
		p.raw(`<tr><td colspan="9">No messages match.</td></tr>`, "\n")
	}
	p.raw("</tbody>\n</table>\n")
	if d.NextURL.set() {
		p.raw("<p><a")
		p.href(d.NextURL)
		p.raw(` class="next">Next page</a></p>`, "\n")
	}
}

// options writes an option per value, the one equal to selected selected.
func options(p *page, values []string, selected string) {
	for _, o := range values {
		p.raw("<option")
		if o == selected {
			p.raw(" selected")
		}
		p.raw(">")
		p.text(o)
		p.raw("</option>")
	}
}

// actions writes the bulk actions the listing's filter allows: requeue its failed
// messages (and skip the head of its key, on an ordered stream), or replay its
// delivered ones when it has no error text or id range, which a replay does not take.
func (d messagesData) actions(p *page, v view) {
	q := d.Query
	p.raw(`<div class="actions">`, "\n")
	if q.Status == "failed" {
		p.raw(`<form method="post" action="/ui/confirm" class="inline">`, "\n")
		d.filterFields(p, v)
		p.hidden("action", "requeue")
		p.raw("\n<button>Requeue every failed message of this filter…</button></form>\n")
		if d.Ordered && q.Key != "" {
			p.raw(`<form method="post" action="/ui/confirm" class="inline">`, "\n")
			p.hidden("csrf", v.CSRF)
			p.hidden("action", "skip")
			p.raw("\n")
			p.hidden("outbox", d.Outbox)
			p.hidden("stream", q.Stream)
			p.raw("\n")
			p.hidden("key", q.Key)
			p.raw("\n<button>Skip the head of this key…</button></form>\n")
		}
	}
	if q.Status == "delivered" && q.Error == "" && q.FromID == "" && q.ToID == "" {
		p.raw(`<form method="post" action="/ui/confirm" class="inline">`, "\n")
		d.filterFields(p, v)
		p.hidden("action", "replay")
		p.raw("\n<button>Replay the delivered messages of this filter…</button></form>\n")
	}
	p.raw("</div>\n")
}

// filterFields writes the listing's filter as hidden fields of an action's form.
func (d messagesData) filterFields(p *page, v view) {
	q := d.Query
	p.hidden("csrf", v.CSRF)
	p.raw("\n")
	p.hidden("outbox", d.Outbox)
	p.hidden("stream", q.Stream)
	p.raw("\n")
	p.hidden("since", q.Since)
	p.hidden("until", q.Until)
	p.raw("\n")
	p.hiddenSet("key", q.Key)
	p.hiddenSet("topic", q.Topic)
	p.hiddenSet("error", q.Error)
	p.hiddenSet("from_id", q.FromID)
	p.hiddenSet("to_id", q.ToID)
}

func (d messageData) write(p *page, v view) {
	m := d.M
	p.raw("<h1>Message ")
	p.num(m.ID)
	p.raw("</h1>\n", `<table class="fields">`, "\n")
	field := func(name markup, value string) {
		p.raw("<tr><th>", name, "</th><td>")
		p.text(value)
		p.raw("</td></tr>\n")
	}
	field("Stream", m.Stream)
	field("Topic", m.Topic)
	field("Key", m.Key)
	p.raw("<tr><th>Status</th><td")
	p.attr("class", "status-"+m.Status)
	p.raw(">")
	p.text(m.Status)
	p.raw("</td></tr>\n")
	field("Attempts", strconv.Itoa(m.Attempts))
	p.raw(`<tr><th>Last error</th><td class="err">`)
	p.text(m.LastError)
	p.raw("</td></tr>\n")
	field("Message id", m.MessageID)
	p.raw("<tr><th>Trace id</th><td>")
	if d.TraceLink.set() {
		p.raw("<a")
		p.href(d.TraceLink)
		p.raw(` rel="noopener noreferrer">`)
		p.text(d.TraceID)
		p.raw("</a>")
	} else {
		p.or(d.TraceID, "—")
	}
	p.raw("</td></tr>\n")
	field("Created", whenAt(m.CreatedAt))
	field("Available", whenAt(m.AvailableAt))
	field("Published", when(m.PublishedAt))
	field("Deferred since", when(m.DeferredSince))
	field("Owner", m.Owner)
	field("Lease until", when(m.LeaseUntil))
	p.raw("</table>\n<h2>Headers</h2>\n", `<table class="fields">`, "\n")
	for _, h := range d.Headers {
		p.raw("<tr><th>")
		p.text(h.Name)
		p.raw("</th><td>")
		p.text(h.Value)
		p.raw("</td></tr>")
	}
	if len(d.Headers) == 0 {
		p.raw("<tr><td>none</td></tr>")
	}
	p.raw("\n</table>\n<h2>Payload</h2>\n", `<p class="hint">`)
	p.num(m.PayloadBytes)
	p.raw(" bytes")
	if m.Truncated {
		p.raw(", the first ")
		p.num(int64(d.Shown))
		p.raw(" shown")
	}
	if d.AsJSON {
		p.raw(", JSON.</p>\n")
	} else {
		p.raw(", hex.</p>\n")
	}
	// A newline first: a parser drops the one a pre's content starts with.
	p.raw(`<pre class="payload">`, "\n")
	p.text(d.Payload)
	p.raw("</pre>\n")
	if v.CanAct {
		d.actions(p, v)
	}
}

// actions writes what may be done to the message: requeue it when failed, skip it
// (or, on an ordered stream, the head of its key) when failed or pending.
func (d messageData) actions(p *page, v view) {
	m := d.M
	id := strconv.FormatInt(m.ID, 10)
	p.raw(`<div class="actions">`, "\n")
	if m.Status == "failed" {
		p.raw(`<form method="post" action="/ui/confirm" class="inline">`, "\n")
		p.hidden("csrf", v.CSRF)
		p.hidden("action", "requeue")
		p.raw("\n")
		p.hidden("outbox", d.Outbox)
		p.hidden("id", id)
		p.raw("\n<button>Requeue…</button></form>\n")
	}
	if slices.Contains([]string{"failed", "pending"}, m.Status) {
		p.raw(`<form method="post" action="/ui/confirm" class="inline">`, "\n")
		p.hidden("csrf", v.CSRF)
		p.hidden("action", "skip")
		p.raw("\n")
		p.hidden("outbox", d.Outbox)
		p.raw("\n")
		if d.Ordered {
			p.hidden("stream", m.Stream)
			p.hidden("key", m.Key)
			p.raw("\n<button>Skip the head of this key…</button>")
		} else {
			p.hidden("id", id)
			p.raw("\n<button>Skip this message…</button>")
		}
		p.raw("</form>\n")
	}
	p.raw("</div>\n")
}
