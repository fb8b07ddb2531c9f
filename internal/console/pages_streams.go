package console

// The streams page, its table (also served alone, as the page refreshes it), and the
// replicas page.

// streamsPage is the streams page: every outbox's streams, sampled.
type streamsPage []outboxStats

func (d streamsPage) write(p *page, _ view) {
	p.raw("<h1>Streams</h1>\n", `<p class="hint">Refreshes every 5 seconds.</p>`, "\n",
		`<div id="streams" data-refresh="/ui/streams/table">`, "\n")
	d.table(p)
	p.raw("</div>\n")
}

// table writes the streams table: a heading and a table per outbox.
func (d streamsPage) table(p *page) {
	for _, o := range d {
		p.raw("<h2>Outbox ")
		p.text(o.Name)
		if o.Table != "" {
			p.raw(" <small>(")
			p.text(o.Table)
			p.raw(")</small>")
		}
		p.raw("</h2>\n")
		p.errorLine(o.Error)
		p.raw("<table>\n<thead><tr><th>Stream</th><th>Driver</th><th>Breaker</th><th>Pending</th><th>In flight</th>",
			"<th>Failed</th><th>Expired</th><th>Deferred</th><th>Oldest pending</th><th>Blocked keys</th><th>Flowing on</th>")
		if o.Activity {
			p.raw("<th>Dead-lettered</th><th>Published (5 min)</th>")
		}
		p.raw("<th></th></tr></thead>\n<tbody>\n")
		for _, s := range o.Streams {
			streamRowOf(p, o.Name, o.Activity, s)
		}
		if len(o.Streams) == 0 {
			p.raw(`<tr><td colspan="14">No streams.</td></tr>`, "\n")
		}
		p.raw("</tbody>\n</table>\n")
	}
}

// streamRowOf writes one stream's row of outbox box; activity adds the throughput
// columns.
func streamRowOf(p *page, box string, activity bool, s streamRow) {
	p.raw("<tr")
	if s.Unserved {
		p.raw(` class="unserved"`)
	}
	p.raw(">\n<td>")
	p.text(s.Stream)
	if s.Unserved {
		p.raw(" <em>(unserved)</em>")
	}
	p.raw("</td>\n<td>")
	p.text(s.Driver)
	p.raw("</td>\n<td")
	p.attr("class", "breaker-"+s.Breaker)
	p.raw(">")
	p.or(s.Breaker, "—")
	approxPending, approxFailed, approxExpired, approxDeferred := s.Approximate()
	p.raw("</td>\n", `<td class="num">`)
	p.approx(s.Pending, approxPending)
	p.raw("</td>\n", `<td class="num">`)
	p.num(s.Leased)
	p.raw("</td>\n")
	if s.Failed != 0 {
		p.raw(`<td class="num bad"><a`)
		p.href(to("/ui/messages", "outbox", box, "stream", s.Stream, "status", "failed"))
		p.raw(">")
		p.approx(s.Failed, approxFailed)
		p.raw("</a></td>\n")
	} else {
		p.raw(`<td class="num">0</td>`, "\n")
	}
	p.raw(`<td class="num">`)
	p.approx(s.Expired, approxExpired)
	p.raw("</td>\n", `<td class="num">`)
	p.approx(s.Deferred, approxDeferred)
	p.raw("</td>\n", `<td class="num">`)
	p.text(age(s.OldestPendingAgeSeconds))
	p.raw("</td>\n", `<td class="num">`)
	if s.Ordered {
		p.num(deref(s.BlockedKeys))
		p.raw(" (")
		p.num(deref(s.BlockedMessages))
		p.raw(" waiting)")
	} else {
		p.raw("—")
	}
	p.raw("</td>\n<td>")
	p.or(s.FlowsOn, "—")
	p.raw("</td>\n")
	if activity {
		p.raw(`<td class="num">`)
		p.num(s.T.DeadLettered)
		p.raw("</td>\n", `<td class="spark"><svg width="120" height="24" viewBox="0 0 120 24" role="img" `,
			`aria-label="messages published per 10 seconds, last 5 minutes">`,
			`<polyline fill="none" stroke="#2a6fdb" stroke-width="1.5"`)
		p.attr("points", s.T.Points())
		p.raw(`/></svg> <span class="num">`)
		p.text(rate(s.T.Rate()))
		p.raw("/s</span></td>\n")
	}
	p.raw("<td><a")
	p.href(to("/ui/messages", "outbox", box, "stream", s.Stream))
	p.raw(">messages</a></td>\n</tr>\n")
}

func (d replicasData) write(p *page, _ view) {
	p.raw("<h1>Replicas</h1>\n<p>This page is served by a replica of version <strong>")
	p.or(d.Version, "unknown")
	p.raw("</strong>")
	if d.Uptime != "" {
		p.raw(", up ")
		p.text(d.Uptime)
	}
	p.raw(".</p>\n",
		`<p class="hint">Below, per outbox, the database sessions holding its janitor lock or a stream's flow lock, from`, "\n",
		`<code>pg_locks</code> and <code>pg_stat_activity</code>: the replicas at work now. A replica holding no lock at`, "\n",
		`this moment does not show; give each replica an <code>application_name</code> in its database URL to tell them apart.</p>`, "\n")
	for _, o := range d.Outboxes {
		p.raw("<h2>Outbox ")
		p.text(o.Name)
		p.raw("</h2>\n")
		p.errorLine(o.Error)
		p.raw("<table>\n<thead><tr><th>Session</th><th>Application name</th><th>Client</th><th>Connected for</th>",
			"<th>Janitor</th><th>Flowing streams</th></tr></thead>\n<tbody>\n")
		for _, h := range o.Holders {
			p.raw(`<tr><td class="num">`)
			p.num(int64(h.PID))
			p.raw("</td><td>")
			p.or(h.Application, "—")
			p.raw("</td><td>")
			p.or(h.ClientAddr, "—")
			p.raw(`</td><td class="num">`)
			p.text(h.Connected)
			p.raw("</td>\n<td>")
			if h.Janitor {
				p.raw("holds the janitor lock")
			}
			p.raw("</td><td>")
			for i, s := range h.Flows {
				if i > 0 {
					p.raw(", ")
				}
				p.text(s)
			}
			p.raw("</td></tr>\n")
		}
		if len(o.Holders) == 0 {
			p.raw(`<tr><td colspan="6">No session holds a lock of this outbox now.</td></tr>`, "\n")
		}
		p.raw("</tbody>\n</table>\n")
	}
}
