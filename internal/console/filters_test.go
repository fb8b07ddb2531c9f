package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
)

// listedIDs returns the ids the listing page links to, in order.
func listedIDs(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`/ui/message\?outbox=[^"]*;id=(\d+)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestTheListingFiltersByKeyTopicIdsAndErrorText: each filter keeps exactly its
// messages, a hostile filter value comes back as text in the form, and a refused
// filter is a 400 naming the field.
func TestTheListingFiltersByKeyTopicIdsAndErrorText(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIReadonly)
	a := f.insert(t, "orders", "acct-1", nil, []byte(`{}`))
	b := f.insert(t, "orders", hostile, nil, []byte(`{}`))
	c3 := f.insert(t, "orders", "acct-1", nil, []byte(`{}`))
	f.fail(t, c3, "Timeout from the broker")
	f.exec(t, `UPDATE {{table}} SET topic = 'refunds' WHERE id = $1`, b)
	c := f.client(t)
	c.login(t, readToken)
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"A key keeps that key's messages.", "key=acct-1", []string{itoa(a), itoa(c3)}},
		{"A hostile key is matched as text.", "key=" + url.QueryEscape(hostile), []string{itoa(b)}},
		{"A topic keeps that topic's messages.", "topic=refunds", []string{itoa(b)}},
		{"An id range keeps its ids, both ends included.", "from_id=" + itoa(b) + "&to_id=" + itoa(c3), []string{itoa(b), itoa(c3)}},
		{"Error text matches in any case.", "error=timeout", []string{itoa(c3)}},
		{"Filters combine.", "key=acct-1&status=failed&stream=orders", []string{itoa(c3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.get(t, "/ui/messages?"+tc.query)
			if got := listedIDs(p.body); p.status != http.StatusOK || strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("GET /ui/messages?%s: %d, ids %v, want 200 and %v", tc.query, p.status, got, tc.want)
			}
			if strings.Contains(p.body, hostile) {
				t.Errorf("the hostile key was written unescaped: %s", p.body)
			}
		})
	}
	p := c.get(t, "/ui/messages?key="+url.QueryEscape(hostile))
	if !strings.Contains(p.body, `name="key" value="`+html.EscapeString(hostile)) && !strings.Contains(p.body, `name="key" value="&lt;script&gt;`) {
		t.Errorf("the key filter does not show the hostile key as text: %s", p.body)
	}
	for _, q := range []string{"from_id=x", "to_id=0", "from_id=9&to_id=3"} {
		if p := c.get(t, "/ui/messages?"+q); p.status != http.StatusBadRequest || !strings.Contains(p.body, "_id") {
			t.Errorf("GET /ui/messages?%s: %d, want 400 naming the id bound", q, p.status)
		}
	}
}

// TestAFilterThatScansItsBudgetSaysSoAndPagesOn: a key filter over more rows than one
// page examines says how many it scanned, that more may match, and links to the next
// page with the filter kept, where the match is found.
func TestAFilterThatScansItsBudgetSaysSoAndPagesOn(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIReadonly)
	f.exec(t, `INSERT INTO {{table}} (stream, topic, key, payload) SELECT 'orders', 't', 'other', '\x00' FROM generate_series(1, 10050)`)
	want := f.insert(t, "orders", "rare", nil, []byte(`{}`))
	c := f.client(t)
	c.login(t, readToken)
	p := c.get(t, "/ui/messages?key=rare")
	if p.status != http.StatusOK || len(listedIDs(p.body)) != 0 || !strings.Contains(p.body, "Scanned 10000 rows, more may match") {
		t.Fatalf("the first page of a rare key: %d, ids %v; want none and the scan note: %s", p.status, listedIDs(p.body), p.body)
	}
	m := regexp.MustCompile(`href="(/ui/messages\?[^"]+)" class="next"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no next page after a scan that ran out: %s", p.body)
	}
	next := html.UnescapeString(m[1])
	if !strings.Contains(next, "key=rare") {
		t.Errorf("the next page %s drops the key filter", next)
	}
	p = c.get(t, next)
	if got := listedIDs(p.body); len(got) != 1 || got[0] != itoa(want) || strings.Contains(p.body, "more may match") {
		t.Errorf("the next page: ids %v, want [%d] and no note", got, want)
	}
}

// TestABulkRequeueOfAFilterCountsItsMatchesAndRequeuesOnlyThem: the listing of a
// stream's failed messages narrowed by error text offers the bulk requeue; the
// confirmation counts the matches and changes nothing; confirming requeues exactly
// them, through ops, logged with the token that did it and the filter.
func TestABulkRequeueOfAFilterCountsItsMatchesAndRequeuesOnlyThem(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	var timeouts, others []int64
	for i := range 4 {
		id := f.insert(t, "orders", "k", nil, []byte(`{}`))
		if i%2 == 0 {
			f.fail(t, id, "timeout talking to the broker")
			timeouts = append(timeouts, id)
		} else {
			f.fail(t, id, "message too large")
			others = append(others, id)
		}
	}
	c := f.client(t)
	csrf := c.login(t, adminToken)
	p := c.get(t, "/ui/messages?stream=orders&status=failed&error=TIMEOUT")
	if !strings.Contains(p.body, `name="error" value="TIMEOUT"`) || !strings.Contains(p.body, "Requeue every failed message of this filter") {
		t.Fatalf("the filtered listing offers no bulk requeue carrying the filter: %s", p.body)
	}
	form := url.Values{"csrf": {csrf}, "action": {"requeue"}, "stream": {"orders"}, "error": {"TIMEOUT"}}
	p = c.do(t, "POST", "/ui/confirm", form)
	if p.status != http.StatusOK || !strings.Contains(p.body, "<strong>2</strong> message(s)") ||
		!strings.Contains(p.body, "whose last error contains &#34;TIMEOUT&#34;") {
		t.Fatalf("confirm: %d %s, want 200 counting 2 and naming the filter", p.status, p.body)
	}
	for _, id := range append(timeouts, others...) {
		if s := f.status(t, id); s != "failed" {
			t.Fatalf("message %d after the confirmation page: %s, want still failed", id, s)
		}
	}
	if p = c.do(t, "POST", "/ui/act", form); p.status != http.StatusOK || !strings.Contains(p.body, "requeued 2 message(s)") {
		t.Fatalf("act: %d %s, want 200 and 2 requeued", p.status, p.body)
	}
	for _, id := range timeouts {
		if s := f.status(t, id); s != "pending" {
			t.Errorf("matching message %d: %s, want pending", id, s)
		}
	}
	for _, id := range others {
		if s := f.status(t, id); s != "failed" {
			t.Errorf("message %d outside the filter: %s, want still failed", id, s)
		}
	}
	if logs := f.logs.String(); !strings.Contains(logs, `"by":"admin"`) || !strings.Contains(logs, `whose last error contains \"TIMEOUT\"`) {
		t.Errorf("the bulk requeue was not logged with who and which filter: %s", logs)
	}

	// Refused: a replay with error text, a stale CSRF token, a read-only session.
	replay := url.Values{"csrf": {csrf}, "action": {"replay"}, "stream": {"orders"}, "error": {"x"}}
	if p := c.do(t, "POST", "/ui/confirm", replay); p.status != http.StatusBadRequest {
		t.Errorf("a replay filtered by error text: %d, want 400", p.status)
	}
	stale := url.Values{"csrf": {"stale"}, "action": {"requeue"}, "stream": {"orders"}, "error": {"large"}}
	if p := c.do(t, "POST", "/ui/act", stale); p.status != http.StatusForbidden || f.status(t, others[0]) != "failed" {
		t.Errorf("a bulk requeue with a wrong CSRF token: %d, message %s; want 403, still failed", p.status, f.status(t, others[0]))
	}
	ro := setup(t, config.UIReadonly)
	id := ro.insert(t, "orders", "k", nil, []byte(`{}`))
	ro.fail(t, id, "timeout")
	rc := ro.client(t)
	rcsrf := rc.login(t, adminToken)
	if p := rc.get(t, "/ui/messages?stream=orders&status=failed&error=timeout"); strings.Contains(p.body, `action="/ui/confirm"`) {
		t.Errorf("a read-only console offers the bulk requeue")
	}
	if p := rc.do(t, "POST", "/ui/act", url.Values{"csrf": {rcsrf}, "action": {"requeue"}, "stream": {"orders"}, "error": {"timeout"}}); p.status != http.StatusForbidden || ro.status(t, id) != "failed" {
		t.Errorf("a bulk requeue in a read-only console: %d, want 403 and the message still failed", p.status)
	}
}

// TestAnOrderedStreamsKeyFilterOffersToSkipItsHead: filtering an ordered stream's
// failed messages by key offers the head skip; an unordered stream's does not.
func TestAnOrderedStreamsKeyFilterOffersToSkipItsHead(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	for _, stream := range []string{"payments", "orders"} {
		id := f.insert(t, stream, "acct-9", nil, []byte(`{}`))
		f.fail(t, id, "refused")
	}
	c := f.client(t)
	c.login(t, adminToken)
	if p := c.get(t, "/ui/messages?stream=payments&status=failed&key=acct-9"); !strings.Contains(p.body, "Skip the head of this key") {
		t.Errorf("an ordered stream's key filter offers no head skip: %s", p.body)
	}
	if p := c.get(t, "/ui/messages?stream=orders&status=failed&key=acct-9"); strings.Contains(p.body, "Skip the head of this key") {
		t.Errorf("an unordered stream's key filter offers a head skip")
	}
}
