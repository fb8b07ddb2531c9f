package console

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/outboxd/outboxd/internal/ops"
)

// fail answers with the error page: msg, as text, and status.
func (c *console) fail(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.render(w, status, s, "error", refusal(msg))
}

// failErr answers an ops error with its status; a failure of the database is logged.
func (c *console) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if status >= 500 {
		c.log.Error("console request failed", "path", r.URL.Path, "err", err)
	}
	c.fail(w, r, sessionOf(r), status, err.Error())
}

// pick returns the outbox the request names (outbox parameter), or the only one.
func (c *console) pick(name, stream string) (Outbox, *ops.Ops, error) {
	all := c.opt.Outboxes()
	targets := make([]ops.Target, len(all))
	for i, o := range all {
		targets[i] = ops.Target{Name: o.Name}
		for _, s := range o.Streams {
			targets[i].Streams = append(targets[i].Streams, s.Name)
		}
	}
	i, err := ops.Pick(targets, name, stream)
	if err != nil {
		return Outbox{}, nil, err
	}
	o := all[i]
	if o.Store == nil {
		return Outbox{}, nil, errWaiting(o.Name)
	}
	return o, ops.New(o.Store, c.now), nil
}

type waitingError string

func (e waitingError) Error() string {
	return "outbox " + string(e) + " is not connected yet: its database has not answered; try again in a moment"
}
func errWaiting(name string) error { return waitingError(name) }

// outboxStats is one outbox's row group on the streams page.
type outboxStats struct {
	Name    string
	Table   string
	Streams []streamRow
	// Activity says the throughput and dead-letter columns are known (Outbox.Activity).
	Activity bool
	Error    string
}

// streamRow is one stream's row: the sampled backlog and, when known, its activity.
type streamRow struct {
	ops.StreamStats
	T Throughput
	// FlowsOn names the session holding the stream's flow lock (the replica flowing
	// it), or is empty.
	FlowsOn string
}

func (c *console) sample(ctx context.Context) []outboxStats {
	var out []outboxStats
	for _, o := range c.opt.Outboxes() {
		os := outboxStats{Name: o.Name}
		if o.Store == nil {
			os.Error = errWaiting(o.Name).Error()
			out = append(out, os)
			continue
		}
		req := ops.StatsRequest{Streams: o.Streams}
		if o.Breakers != nil {
			req.Breakers = o.Breakers()
		}
		st, err := ops.New(o.Store, c.now).Stats(ctx, req)
		if err != nil {
			c.log.Warn("console stats failed", "outbox", o.Name, "err", err)
			os.Error = err.Error()
		}
		os.Table, os.Activity = st.Table, o.Activity != nil
		flows := map[string]string{}
		holders, err := ops.New(o.Store, c.now).Holders(ctx, o.Streams)
		if err != nil {
			c.log.Warn("console lock holders failed", "outbox", o.Name, "err", err)
		}
		for _, h := range holders {
			for _, st := range h.Flows {
				flows[st] = h.Label()
			}
		}
		for _, ss := range st.Streams {
			row := streamRow{StreamStats: ss, FlowsOn: flows[ss.Stream]}
			if o.Activity != nil {
				row.T = o.Activity.Of(ss.Stream)
			}
			os.Streams = append(os.Streams, row)
		}
		out = append(out, os)
	}
	return out
}

func (c *console) streams(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	c.render(w, http.StatusOK, sessionOf(r), "streams", streamsPage(c.sample(ctx)))
}

// streamsTable is the streams table alone, fetched every few seconds by the page.
func (c *console) streamsTable(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	var p page
	streamsPage(c.sample(ctx)).table(&p)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(p.bytes())
}

// messagesData is the listing page: the filter as given, the outboxes to choose
// from, and one page of rows.
type messagesData struct {
	Outbox   string
	Outboxes []string
	Query    ops.MessageQuery
	Statuses []string
	Page     ops.MessagePage
	Error    string
	// NextURL is the next page's address, the filter kept; Budget the rows a page
	// filtered by key, topic or error text examines at most, and Short whether this
	// page stopped at that budget before it filled (more may match).
	NextURL link
	Budget  int
	Short   bool
	// Ordered says the filter's stream is an ordered one (its heads may be skipped).
	Ordered bool
}

// queryOf reads the listing's filter from a request's URL.
func queryOf(q url.Values) ops.MessageQuery {
	return ops.MessageQuery{
		Stream: q.Get("stream"), Status: q.Get("status"), Since: q.Get("since"), Until: q.Get("until"),
		Cursor: q.Get("cursor"), Limit: q.Get("limit"), FromID: q.Get("from_id"), ToID: q.Get("to_id"),
		Key: q.Get("key"), Topic: q.Get("topic"), Error: q.Get("error"),
	}
}

// nextURL is the address of the page after cursor, with the same outbox and filter.
func nextURL(outbox string, q ops.MessageQuery, cursor string) link {
	v := url.Values{}
	for _, p := range []struct{ k, v string }{{"outbox", outbox}, {"stream", q.Stream}, {"status", q.Status},
		{"since", q.Since}, {"until", q.Until}, {"from_id", q.FromID}, {"to_id", q.ToID}, {"key", q.Key},
		{"topic", q.Topic}, {"error", q.Error}, {"limit", q.Limit}, {"cursor", cursor}} {
		if p.v != "" {
			v.Set(p.k, p.v)
		}
	}
	return toQuery("/ui/messages", v)
}

var statuses = []string{"pending", "leased", "delivered", "failed", "expired"}

func (c *console) messages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := messagesData{Outbox: q.Get("outbox"), Statuses: statuses, Query: queryOf(q), Budget: ops.ScanBudget}
	for _, o := range c.opt.Outboxes() {
		d.Outboxes = append(d.Outboxes, o.Name)
	}
	status := http.StatusOK
	box, o, err := c.pick(d.Outbox, d.Query.Stream)
	if err == nil {
		d.Outbox = box.Name // picked by stream: the links name it, as ids repeat across outboxes
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		d.Page, err = o.ListMessages(ctx, d.Query)
		for _, st := range box.Streams {
			d.Ordered = d.Ordered || (st.Name == d.Query.Stream && st.Ordered)
		}
	}
	if d.Page.NextCursor != "" {
		d.NextURL = nextURL(d.Outbox, d.Query, d.Page.NextCursor)
		d.Short = d.Page.Scanned == int64(ops.ScanBudget) && len(d.Page.Messages) < pageSize(d.Query.Limit)
	}
	if err != nil {
		status, d.Error = statusOf(err), err.Error()
		if status >= 500 {
			c.log.Error("console listing failed", "err", err)
		}
	}
	c.render(w, status, sessionOf(r), "messages", d)
}

// pageSize is the rows a listing page holds, from its limit parameter.
func pageSize(limit string) int {
	if n, err := strconv.Atoi(limit); err == nil && n > 0 {
		return n
	}
	return ops.DefaultPageLimit
}

// messageData is one message opened.
type messageData struct {
	Outbox  string
	M       ops.MessageDetail
	Headers []header
	// Payload is the payload as shown: indented JSON, or a hex dump.
	Payload string
	AsJSON  bool
	Shown   int
	// Ordered offers to skip the head of the message's key; otherwise the message
	// itself is offered.
	Ordered bool
	// TraceID is the trace of the message's traceparent header, if it has a valid one;
	// TraceLink its page in the trace viewer (tracing.ui_url), if one is configured.
	TraceID   string
	TraceLink link
}

// traceparent is a W3C trace context header of version 00 or later, compiled when a
// message page first asks (its bounded repetitions make a program of 20 KB).
var traceparent = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$`)
})

// traceOf returns the trace id of a message's traceparent header, or "". An all-zero
// id is invalid by the specification.
func traceOf(headers map[string]string) string {
	for k, v := range headers {
		if strings.EqualFold(k, "traceparent") {
			if m := traceparent().FindStringSubmatch(strings.TrimSpace(v)); m != nil && strings.Trim(m[1], "0") != "" {
				return m[1]
			}
		}
	}
	return ""
}

type header struct{ Name, Value string }

func (c *console) message(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, err := strconv.ParseInt(q.Get("id"), 10, 64)
	if err != nil {
		c.fail(w, r, sessionOf(r), http.StatusBadRequest, "id: want a message id, a whole number, got "+strconv.Quote(q.Get("id")))
		return
	}
	box, o, err := c.pick(q.Get("outbox"), "")
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	m, err := o.OpenMessage(ctx, id)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d := messageData{Outbox: box.Name, M: m, Shown: len(m.Payload)}
	for _, st := range box.Streams {
		d.Ordered = d.Ordered || (st.Name == m.Stream && st.Ordered)
	}
	for k, v := range m.Headers {
		d.Headers = append(d.Headers, header{k, v})
	}
	slices.SortFunc(d.Headers, func(a, b header) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	d.Payload, d.AsJSON = showPayload(m.Payload, m.Truncated)
	if d.TraceID = traceOf(m.Headers); d.TraceID != "" && c.opt.TraceURL != "" {
		// config.Validate wants an http(s) URL; anything else is not linked.
		d.TraceLink, _ = webLink(strings.ReplaceAll(c.opt.TraceURL, "{trace_id}", d.TraceID))
	}
	c.render(w, http.StatusOK, sessionOf(r), "message", d)
}

// showPayload shows a whole JSON payload indented, and anything else (or a JSON one
// cut short) as a hex dump.
func showPayload(p []byte, truncated bool) (string, bool) {
	if !truncated && json.Valid(p) {
		var buf bytes.Buffer
		if json.Indent(&buf, p, "", "  ") == nil {
			return buf.String(), true
		}
	}
	return hex.Dump(p), false
}
